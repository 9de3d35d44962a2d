package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/postingsvc/posting/internal/operate/overdue"
)

// newPostsCommand is `posting posts`: the posts seen from the operator's
// side, with the flag rules of `posting outbox`.
func newPostsCommand() *cobra.Command {
	return commandGroup("posts", "Check the posts against their time: overdue",
		(&postsOverdue{}).command())
}

// postsOverdue is `posting posts overdue`.
type postsOverdue struct {
	operator
	grace  time.Duration
	limit  int
	asJSON bool
	cmd    *cobra.Command
}

func (c *postsOverdue) command() *cobra.Command {
	c.cmd = c.define(&cobra.Command{
		Use:   "overdue",
		Short: "List the posts past their time that are neither PUBLISHED, CANCELLED nor EXPIRED, and why",
		Long: "Lists the overdue posts, longest overdue first: those more than --overdue-after past their\n" +
			"scheduledAt (by the database's clock) that are neither PUBLISHED, CANCELLED nor EXPIRED.\n" +
			"Each line says where the post is stuck (REASON) and the last error there (DETAIL); see\n" +
			"docs/operations.md#postingpostsoverdue for what to do.\n\n" +
			"The exit status is 0 whether or not posts are overdue, 1 when the database cannot be read\n" +
			"and 2 for a bad flag. Scripts read the count from --json:\n" +
			"  posting posts overdue --json | jq -e '.count == 0'",
		Args: noArgs,
	}, c.check, c.Run)
	fs := c.cmd.Flags()
	fs.DurationVar(&c.grace, "overdue-after", overdue.DefaultConfig().Grace,
		"grace after scheduledAt past which a post is overdue; the same setting as serve's (1s..24h)")
	showEnvTwins(fs)
	fs.IntVar(&c.limit, "limit", overdue.DefaultListLimit, fmt.Sprintf("posts to show, longest overdue first (1..%d); the count is of all", overdue.MaxListLimit))
	fs.BoolVar(&c.asJSON, "json", false, "print JSON for scripts")
	return c.cmd
}

// check reads POSTING_OVERDUE_AFTER when --overdue-after was not given (an
// operator compares with what serve counts), then checks both flags.
func (c *postsOverdue) check([]string) error {
	only := &cobra.Command{}
	only.Flags().AddFlag(c.cmd.Flags().Lookup("overdue-after"))
	if err := applyEnv(only); err != nil {
		return err
	}
	// The grace's limits are serve's: the overdue check's configuration
	// judges it, and names the setting when it refuses.
	oc := overdue.DefaultConfig()
	oc.Grace, oc.Interval, oc.InstanceID = c.grace, min(oc.Interval, c.grace), "posting posts overdue"
	if err := oc.Validate(); err != nil {
		return settingError(err)
	}
	if c.limit < 1 || c.limit > overdue.MaxListLimit {
		return badFlag("--limit", strconv.Itoa(c.limit), fmt.Sprintf("want 1..%d", overdue.MaxListLimit))
	}
	return nil
}

// Run prints the summary and the overdue posts.
func (c *postsOverdue) Run(ctx context.Context, _ []string) error {
	posts, sum, err := overdue.List(ctx, c.db, c.grace, c.limit)
	if err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(overdue.NewListJSON(posts, sum, c.grace))
	}
	w := c.out
	if sum.Count == 0 {
		_, err := fmt.Fprintf(w, "no overdue posts: none is more than %s past its scheduledAt\n", c.grace)
		return err
	}
	fmt.Fprintf(w, "overdue posts: %d (more than %s past their scheduledAt), the oldest %s past it\n",
		sum.Count, c.grace, sum.Oldest.Round(time.Second))
	if len(posts) < sum.Count {
		fmt.Fprintf(w, "showing the %d longest overdue (--limit)\n", len(posts))
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "POST ID\tSTATUS\tSCHEDULED AT\tOVERDUE FOR\tREASON\tRE-ANNOUNCED\tEVENT\tPUBLICATION\tDETAIL")
	for _, p := range posts {
		publication := orDash(p.PublicationStatus)
		if p.PublicationStatus != "" && p.PublicationAttempts > 0 {
			attempts := "failed attempts"
			if p.PublicationAttempts == 1 {
				attempts = "failed attempt"
			}
			publication = fmt.Sprintf("%s (%d %s)", p.PublicationStatus, p.PublicationAttempts, attempts)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.ID, p.Status, p.ScheduledAt.UTC().Format(time.RFC3339),
			p.Overdue.Round(time.Second), p.Reason, p.Reannounced, orDash(string(p.EventStatus)), publication,
			lastErrorCell(&p.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, "\nwhat each reason means and what to do: docs/operations.md#postingpostsoverdue")
	return err
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
