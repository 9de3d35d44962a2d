package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/internal/storage/database"
)

// operator is what every operator subcommand (posting outbox ..., posting
// publications ...) is made of: the common settings, and, while it runs,
// the database, the logger and where to print. Each subcommand is a type
// that embeds it, with a command() that declares its flags and a
// Run(ctx, args) that does the work (litestream's StatusCommand).
type operator struct {
	s   settings
	db  *gorm.DB
	log *slog.Logger
	out io.Writer
}

// open prepares the settings, opens the database and returns what closes
// it: the common flags have environment twins, the options of one
// invocation (--status, --limit, --json, ...) do not, so a stray variable
// cannot change what an operator typed.
func (o *operator) open(cmd *cobra.Command) (closeDB func(), err error) {
	common := pflag.NewFlagSet("common", pflag.ContinueOnError)
	addCommonFlags(common, &settings{})
	only := &cobra.Command{}
	common.VisitAll(func(f *pflag.Flag) {
		if real := cmd.Flags().Lookup(f.Name); real != nil {
			only.Flags().AddFlag(real)
		}
	})
	if err := prepare(only, &o.s); err != nil {
		return nil, err
	}
	o.log = newLogger(cmd.ErrOrStderr(), &o.s)
	db, err := openExistingDB(&o.s)
	if err != nil {
		return nil, err
	}
	o.db, o.out = db.DB, cmd.OutOrStdout()
	// A stray ./data/posting.db read instead of the production database
	// gives output that looks the same: say which one was read.
	o.log.Info("reading database", "database", shownDatabase(&o.s, db))
	return func() { db.Close() }, nil
}

// shownDatabase names the database an operator command reads: the URL given
// with its password masked (url.URL.Redacted), or the SQLite file's
// absolute path.
func shownDatabase(s *settings, db *database.DB) string {
	if path := db.File(); path != "" {
		if abs, err := filepath.Abs(path); err == nil {
			return abs
		}
		return path
	}
	u, err := url.Parse(s.DatabaseURL)
	if err != nil {
		return db.Location // without credentials
	}
	u.RawQuery = "" // parameters can hold credentials too (password=...)
	return u.Redacted()
}

// define completes a subcommand's cobra command: the common flags, and a
// RunE that runs check first, on the flags and arguments alone (a usage
// error opens nothing), then run against the database. The caller adds the
// subcommand's own flags.
func (o *operator) define(cmd *cobra.Command, check func(args []string) error, run func(ctx context.Context, args []string) error) *cobra.Command {
	addCommonFlags(cmd.Flags(), &o.s)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if check != nil {
			if err := check(args); err != nil {
				return err
			}
		}
		closeDB, err := o.open(cmd)
		if err != nil {
			return err
		}
		defer closeDB()
		return run(cmd.Context(), args)
	}
	return cmd
}

// now is the database's clock: the times an operator command writes
// (next_attempt_at of a requeue) or compares (the purge cutoff against
// sent_at, a waiting row's age) meet times the relays wrote, so they come
// from the one clock every instance shares, not the operator's machine.
func (o *operator) now(ctx context.Context) (time.Time, error) { return database.Now(ctx, o.db) }

// audit logs a change the operator made as one line with msg "audit", the
// shape of the admin API's: the action, the ids it touched (empty for one
// on many rows), who ran it (operatorSource), then fields.
func (o *operator) audit(action string, ids []int64, fields ...any) {
	o.log.Info("audit", append(append([]any{"action", action, "ids", ids}, operatorSource()...), fields...)...)
}

// printJSON prints v indented, for scripts.
func (o *operator) printJSON(v any) error {
	enc := json.NewEncoder(o.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// noArgs refuses positional arguments as a usage error (exit 2).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])}
	}
	return nil
}

// commandGroup is a command that only groups the operator subcommands subs
// (posting outbox, posting publications): alone it prints its help, and it
// takes no arguments.
func commandGroup(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(subs...)
	return cmd
}

func badFlag(flag, value, why string) error {
	return usageError{fmt.Errorf("invalid %s %q: %s", flag, value, why)}
}

// parseIDs parses the ID arguments; none, or any bad one, is a usage error
// (none says need, a bad one is named and says what an ID is).
func parseIDs(args []string, need, what string) ([]int64, error) {
	if len(args) == 0 {
		return nil, usageError{errors.New(need)}
	}
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usageError{fmt.Errorf("invalid ID argument %q: want a positive %s", a, what)}
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// reportEach prints a table of one line per id of an operation on rows
// given by id: "ID  verb (now STATUS)" for each done (outcome gives its
// status, and logs it), "ID  not verb: reason" for each refused (outcome
// gives the reason). It returns an error (exit 1) when any was refused.
func reportEach[R any](o *operator, idHeader, verb string, results []R, outcome func(R) (id int64, text string, done bool)) error {
	tw := newTable(o.out)
	fmt.Fprintf(tw, "%s\tRESULT\n", idHeader)
	refused := 0
	for _, r := range results {
		id, text, done := outcome(r)
		if !done {
			refused++
			fmt.Fprintf(tw, "%d\tnot %s: %s\n", id, verb, text)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s (now %s)\n", id, verb, text)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if refused > 0 {
		return fmt.Errorf("%d of %d ids not %s", refused, len(results), verb)
	}
	return nil
}

// refusedReason is the text of a refused id's error: the Reason of a
// *database.IDError (*outbox.RowError, *worker.PublicationError) when err
// is one, else err's own text.
func refusedReason(err error) string {
	var e *database.IDError
	if errors.As(err, &e) {
		return e.Reason
	}
	return err.Error()
}

// listFlags are the flags of a list subcommand: --status, one of names (as
// "A, B or C"), --limit up to maxLimit, and --json.
type listFlags struct {
	asJSON   bool
	status   string
	limit    int
	names    string
	maxLimit int
}

// add declares the flags on fs with their defaults.
func (l *listFlags) add(fs *pflag.FlagSet, status, names string, limit, maxLimit int) {
	l.names, l.maxLimit = names, maxLimit
	fs.StringVar(&l.status, "status", status, names)
	fs.IntVar(&l.limit, "limit", limit, fmt.Sprintf("rows to show (1..%d)", maxLimit))
	fs.BoolVar(&l.asJSON, "json", false, "print JSON for scripts")
}

// parseListFlags returns the status of --status, read by parse, after
// checking it and --limit; a bad one is a usage error.
func parseListFlags[S any](l *listFlags, parse func(string) (S, error)) (S, error) {
	st, err := parse(l.status)
	if err != nil {
		return st, badFlag("--status", l.status, "want "+l.names)
	}
	if l.limit < 1 || l.limit > l.maxLimit {
		return st, badFlag("--limit", strconv.Itoa(l.limit), fmt.Sprintf("want 1..%d", l.maxLimit))
	}
	return st, nil
}

// printList prints what a list subcommand found: {"items": [...]} with
// --json, the line none when there is nothing, else a table of header and
// a row per item (tab-separated cells).
func printList[T any](o *operator, l *listFlags, items []T, none, header string, row func(item T) string) error {
	if l.asJSON {
		return o.printJSON(map[string]any{"items": items})
	}
	if len(items) == 0 {
		_, err := fmt.Fprintln(o.out, none)
		return err
	}
	tw := newTable(o.out)
	fmt.Fprintln(tw, header)
	for _, item := range items {
		fmt.Fprintln(tw, row(item))
	}
	return tw.Flush()
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// oneLine keeps a table row on one line and readable: each run of white
// space becomes one space, and what a terminal would act on rather than
// show is escaped (terminalSafe). The cells it makes hold text from brokers
// and webhook receivers.
func oneLine(s string, n int) string {
	s = terminalSafe(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// terminalSafe returns s with every character that is not printable
// written as a Go escape (\x1b, \u202e): escape sequences, carriage
// returns, bells and bidirectional overrides from outside could otherwise
// recolour the terminal, rewrite its title or hide part of the line.
func terminalSafe(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}

// lastErrorCell is a row's last error as a table cell: "-" when none.
func lastErrorCell(lastErr *string) string {
	if lastErr == nil || *lastErr == "" {
		return "-"
	}
	return oneLine(*lastErr, 100)
}
