package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gorm.io/gorm"

	"github.com/postingsvc/posting/database"
	"github.com/postingsvc/posting/outbox"
)

// newOutboxCommand is `posting outbox`: the operator tools against the
// database of --database-url / POSTING_DATABASE_URL. The database, data dir,
// instance id and log format flags have their environment twins; the
// options of one invocation (--status, --limit, --json, ...) do not, so a
// stray variable cannot change what an operator typed.
func newOutboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect and repair the outbox: stats, list, requeue, discard, purge",
		Args:  outboxNoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(outboxStatsCommand(), outboxListCommand(), outboxRequeueCommand(),
		outboxDiscardCommand(), outboxPurgeCommand())
	return cmd
}

func outboxStatsCommand() *cobra.Command {
	var s settings
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Rows by status, the oldest waiting row, and what FAIL rows hold",
		Args:  outboxNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return outboxWithDB(cmd, &s, func(c outboxCtx) error {
				now, err := c.now(cmd.Context())
				if err != nil {
					return err
				}
				st, err := outbox.Stats(cmd.Context(), c.db, now)
				if err != nil {
					return err
				}
				if asJSON {
					return outboxJSON(cmd.OutOrStdout(), st)
				}
				return outboxPrintStats(cmd.OutOrStdout(), st)
			})
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func outboxListCommand() *cobra.Command {
	var s settings
	var asJSON bool
	var status string
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List rows of one status, oldest first",
		Args:  outboxNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := outbox.ParseStatus(status)
			if err != nil {
				return outboxBadFlag("--status", status, "want PENDING, PROCESSING, SENT, RETRY or FAIL")
			}
			if limit < 1 || limit > outbox.MaxListLimit {
				return outboxBadFlag("--limit", strconv.Itoa(limit), fmt.Sprintf("want 1..%d", outbox.MaxListLimit))
			}
			return outboxWithDB(cmd, &s, func(c outboxCtx) error {
				items, err := outbox.List(cmd.Context(), c.db, st, limit)
				if err != nil {
					return err
				}
				if asJSON {
					return outboxJSON(cmd.OutOrStdout(), map[string]any{"items": items})
				}
				return outboxPrintList(cmd.OutOrStdout(), st, items)
			})
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	cmd.Flags().StringVar(&status, "status", string(outbox.StatusFail), "PENDING, PROCESSING, SENT, RETRY or FAIL")
	cmd.Flags().IntVar(&limit, "limit", outbox.DefaultListLimit, fmt.Sprintf("rows to show (1..%d)", outbox.MaxListLimit))
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func outboxRequeueCommand() *cobra.Command {
	var s settings
	var all bool
	cmd := &cobra.Command{
		Use:   "requeue ID... | --all-failed",
		Short: "Make FAIL rows PENDING again with their retries reset",
		Long: "Makes each given FAIL row PENDING again, retries reset and due now, and reports each id.\n" +
			"Rows that are not FAIL, are discarded or changed meanwhile are refused and left as they are;\n" +
			"then the exit status is 1. --all-failed requeues every FAIL row that is not discarded.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if all && len(args) > 0 {
				return usageError{errors.New("requeue: give IDs or --all-failed, not both")}
			}
			if all {
				return outboxWithDB(cmd, &s, func(c outboxCtx) error {
					now, err := c.now(cmd.Context())
					if err != nil {
						return err
					}
					n, err := outbox.RequeueAllFailed(cmd.Context(), c.db, now, 0)
					if err != nil {
						return err
					}
					c.log.Info("all FAIL outbox rows requeued by an operator", "requeued", n)
					fmt.Fprintf(cmd.OutOrStdout(), "requeued %d FAIL rows\n", n)
					return nil
				})
			}
			ids, err := outboxIDs("requeue", args)
			if err != nil {
				return err
			}
			return outboxWithDB(cmd, &s, func(c outboxCtx) error {
				now, err := c.now(cmd.Context())
				if err != nil {
					return err
				}
				return outboxReport(c, cmd.OutOrStdout(), "requeued", outbox.Requeue(cmd.Context(), c.db, ids, now))
			})
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	cmd.Flags().BoolVar(&all, "all-failed", false, "requeue every FAIL row that is not discarded")
	return cmd
}

func outboxDiscardCommand() *cobra.Command {
	var s settings
	cmd := &cobra.Command{
		Use:   "discard ID...",
		Short: "Give up on FAIL rows: they stay FAIL in the history and stop holding their post",
		Long: "Marks each given FAIL row discarded: it keeps status FAIL and its history, gets a note in\n" +
			"last_error, and no longer holds the later events of its post, which the relay then sends.\n" +
			"A discarded row cannot be requeued. Refused ids make the exit status 1.",
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := outboxIDs("discard", args)
			if err != nil {
				return err
			}
			return outboxWithDB(cmd, &s, func(c outboxCtx) error {
				now, err := c.now(cmd.Context())
				if err != nil {
					return err
				}
				return outboxReport(c, cmd.OutOrStdout(), "discarded", outbox.Discard(cmd.Context(), c.db, ids, now))
			})
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	return cmd
}

func outboxPurgeCommand() *cobra.Command {
	var s settings
	var olderThan, pause time.Duration
	var batch int
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete SENT rows sent longer ago than --older-than, in small batches",
		Long: "Deletes SENT rows sent longer ago than --older-than, never rows of another status,\n" +
			"--batch-size rows per statement with --pause between statements: what the background\n" +
			"cleaner of serve does with POSTING_OUTBOX_RETENTION, once.",
		Args: outboxNoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return outboxBadFlag("--older-than", olderThan.String(), "must be positive")
			}
			if batch < 1 || batch > outbox.MaxPurgeBatchSize {
				return outboxBadFlag("--batch-size", strconv.Itoa(batch), fmt.Sprintf("want 1..%d", outbox.MaxPurgeBatchSize))
			}
			if pause < 0 {
				return outboxBadFlag("--pause", pause.String(), "must not be negative")
			}
			return outboxWithDB(cmd, &s, func(c outboxCtx) error {
				now, err := c.now(cmd.Context())
				if err != nil {
					return err
				}
				cutoff := database.Normalize(now.Add(-olderThan))
				n, err := outbox.Purge(cmd.Context(), c.db, cutoff, batch, pause)
				if n > 0 {
					c.log.Info("SENT outbox rows purged by an operator", "deleted", n, "sent_before", cutoff)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %d SENT rows sent before %s\n", n, cutoff.Format(time.RFC3339))
				return err
			})
		},
	}
	addCommonFlags(cmd.Flags(), &s)
	cmd.Flags().DurationVar(&olderThan, "older-than", outbox.DefaultRetention, "delete SENT rows sent longer ago than this")
	cmd.Flags().IntVar(&batch, "batch-size", outbox.DefaultPurgeBatchSize, fmt.Sprintf("rows per DELETE statement (1..%d)", outbox.MaxPurgeBatchSize))
	cmd.Flags().DurationVar(&pause, "pause", outbox.DefaultPurgePause, "pause between two DELETE statements")
	return cmd
}

// outboxNoArgs refuses positional arguments as a usage error (exit 2).
func outboxNoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args[0])}
	}
	return nil
}

func outboxBadFlag(flag, value, why string) error {
	return usageError{fmt.Errorf("invalid %s %q: %s", flag, value, why)}
}

// outboxIDs parses the ID arguments; any bad one is a usage error naming it.
func outboxIDs(verb string, args []string) ([]int64, error) {
	if len(args) == 0 {
		if verb == "requeue" {
			return nil, usageError{errors.New("requeue needs at least one ID argument, or --all-failed")}
		}
		return nil, usageError{fmt.Errorf("%s needs at least one ID argument", verb)}
	}
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usageError{fmt.Errorf("invalid ID argument %q: want a positive outbox row id", a)}
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// outboxPrepare reads the environment twins of the common flags only (see
// newOutboxCommand) and validates them.
func outboxPrepare(cmd *cobra.Command, s *settings) error {
	common := pflag.NewFlagSet("common", pflag.ContinueOnError)
	addCommonFlags(common, &settings{})
	only := &cobra.Command{}
	common.VisitAll(func(f *pflag.Flag) {
		if real := cmd.Flags().Lookup(f.Name); real != nil {
			only.Flags().AddFlag(real)
		}
	})
	return prepare(only, s)
}

// outboxCtx is what a subcommand gets to work with.
type outboxCtx struct {
	db  *gorm.DB
	log *slog.Logger
}

// now is the database's clock: the times an operator command writes
// (next_attempt_at of a requeue) or compares (the purge cutoff against
// sent_at, a waiting row's age) meet times the relays wrote, so they come
// from the one clock every instance shares, not the operator's machine.
func (c outboxCtx) now(ctx context.Context) (time.Time, error) { return database.Now(ctx, c.db) }

// outboxWithDB prepares the settings, opens the database, runs fn and
// closes the database.
func outboxWithDB(cmd *cobra.Command, s *settings, fn func(outboxCtx) error) error {
	if err := outboxPrepare(cmd, s); err != nil {
		return err
	}
	log := newLogger(cmd.ErrOrStderr(), s)
	db, err := openExistingDB(s)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(outboxCtx{db: db.DB, log: log})
}

func outboxJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func outboxTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func outboxPrintStats(w io.Writer, st outbox.Summary) error {
	tw := outboxTable(w)
	fmt.Fprintln(tw, "STATUS\tROWS")
	for _, s := range outbox.Statuses {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.Counts[s])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nFAIL rows waiting for an operator: %d (discarded: %d)\n", st.Failed, st.Discarded)
	if o := st.OldestWaiting; o != nil {
		fmt.Fprintf(w, "oldest waiting: id %d (post %d, %s), created %s, %s ago\n",
			o.ID, o.PostID, o.Status, o.Created.Format(time.RFC3339), o.Age.Round(time.Second))
	} else {
		fmt.Fprintln(w, "oldest waiting: none")
	}
	fmt.Fprintf(w, "blocked behind a FAIL row of their post: %d\n", st.Blocked)
	if len(st.Blocking) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = outboxTable(w)
	fmt.Fprintln(tw, "BLOCKING ID\tEVENT ID\tPOST ID\tBLOCKED")
	for _, b := range st.Blocking {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\n", b.ID, b.EventID, b.PostID, b.Blocked)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "release them with: posting outbox requeue ID... (or discard ID...)")
	return err
}

func outboxPrintList(w io.Writer, status outbox.Status, items []outbox.Entry) error {
	if len(items) == 0 {
		_, err := fmt.Fprintf(w, "no %s rows\n", status)
		return err
	}
	tw := outboxTable(w)
	fmt.Fprintln(tw, "ID\tEVENT ID\tTYPE\tPOST ID\tRETRIES\tCREATED\tLAST ERROR")
	for _, e := range items {
		lastErr := "-"
		if e.LastError != nil && *e.LastError != "" {
			lastErr = outboxOneLine(*e.LastError, 100)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", e.ID, e.EventID, e.EventType, e.PostID, e.RetryCount,
			e.Created.Format(time.RFC3339), lastErr)
	}
	return tw.Flush()
}

// outboxOneLine keeps a table row on one line and readable.
func outboxOneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// outboxReport prints one line per id and returns an error (exit 1) when
// any id was refused.
func outboxReport(c outboxCtx, w io.Writer, verb string, results []outbox.RowResult) error {
	tw := outboxTable(w)
	fmt.Fprintln(tw, "ID\tRESULT")
	refused := 0
	for _, r := range results {
		if r.Err != nil {
			refused++
			reason := r.Err.Error()
			var re *outbox.RowError
			if errors.As(r.Err, &re) {
				reason = re.Reason
			}
			fmt.Fprintf(tw, "%d\tnot %s: %s\n", r.ID, verb, reason)
			continue
		}
		c.log.Info("outbox row "+verb+" by an operator", "outbox_id", r.ID, "event_id", r.Row.EventID, "post_id", r.Row.PostID)
		fmt.Fprintf(tw, "%d\t%s (now %s)\n", r.ID, verb, r.Row.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if refused > 0 {
		return fmt.Errorf("%d of %d ids not %s", refused, len(results), verb)
	}
	return nil
}
