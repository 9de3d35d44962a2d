package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The pages are written for a reader who wants to do something: each
// page's sentences average at most 25 words and none runs over 60, no table
// cell holds more than 400 characters, and no page keeps lab notes (load
// averages, "this machine", dated runs, what was tried and dropped). How a
// claim was tested belongs in the test that tests it, not on the page.
//
// Words are the whitespace-separated tokens of prose. Headings, fenced and
// indented code blocks and table rows are not sentences; table cells are
// checked for length only. List items are prose, each its own paragraph.

const (
	maxMeanWordsPerSentence = 25
	maxWordsPerSentence     = 60
	maxTableCellChars       = 400
)

// docsPages are the README and every page of docs/, relative to this
// package: those for users and operators, and design and development,
// written for contributors, who are readers too.
func docsPages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs, "docs/ has pages")
	return append([]string{filepath.Join("..", "..", "README.md")}, docs...)
}

// labNote matches what belongs in a lab notebook rather than on a user page:
// the load of the machine a figure was taken on, the machine itself, dated
// runs, and what was tried and dropped or lives outside the repository.
var labNote = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`\bload averages?\b`,
	`\bthis\s+(?:[\w-]+\s+){0,2}machine\b`,
	`\bmachine shared with\b`,
	`\b\d+ shared cores?\b`,
	`\btried and not kept\b`,
	`\bnot in the repository\b`,
	`\bruns? (?:of|on) \d{4}-\d{2}`,
	`\bon \d{4}-\d{2}-\d{2}\b`,
	`\b\d{4}-\d{2}-\d{2} runs?\b`,
}, "|"))

func TestPagesHaveSentencesAReaderCanHold(t *testing.T) {
	t.Parallel()
	for _, path := range docsPages(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			page := readPageProse(string(raw))
			require.NotEmpty(t, page.sentences, "%s has prose", name)

			words, longest := 0, 0
			for _, s := range page.sentences {
				n := len(strings.Fields(s))
				words += n
				longest = max(longest, n)
				if n > maxWordsPerSentence {
					t.Errorf("%s: a sentence of %d words (at most %d):\n\t%s", name, n, maxWordsPerSentence, s)
				}
			}
			mean := float64(words) / float64(len(page.sentences))
			t.Logf("%s: %d sentences, mean %.1f words, longest %d; %d table cells, longest %d characters",
				name, len(page.sentences), mean, longest, len(page.cells), longestCell(page.cells))
			if mean > maxMeanWordsPerSentence {
				t.Errorf("%s: sentences average %.1f words (at most %d); shorten or split the longest", name, mean, maxMeanWordsPerSentence)
			}
			for _, c := range page.cells {
				if n := utf8.RuneCountInString(c); n > maxTableCellChars {
					t.Errorf("%s: a table cell of %d characters (at most %d):\n\t%s", name, n, maxTableCellChars, c)
				}
			}
			for _, part := range [][]string{page.headings, page.sentences, page.cells} {
				for _, s := range part {
					if m := labNote.FindString(s); m != "" {
						t.Errorf("%s: lab note %q (the evidence belongs in a test, not on the page):\n\t%s", name, m, s)
					}
				}
			}
		})
	}
}

func longestCell(cells []string) int {
	n := 0
	for _, c := range cells {
		n = max(n, utf8.RuneCountInString(c))
	}
	return n
}

// pageProse is what a Markdown page gives a reader to hold: sentences of
// prose, table cells and headings. Code blocks are left out.
type pageProse struct {
	sentences []string
	cells     []string
	headings  []string
}

var (
	listItem   = regexp.MustCompile(`^(?:[-*+]|\d{1,3}[.)])\s+`)
	imageOnly  = regexp.MustCompile(`^!\[[^\]]*\]\([^)]*\)$`)
	tableRule  = regexp.MustCompile(`^:?-+:?$`)
	htmlOnly   = regexp.MustCompile(`^<[^>]*>.*</?[^>]*>$|^<[^>]*/?>$`)
	fenceStart = regexp.MustCompile("^(`{3,}|~{3,})")
)

// readPageProse splits a Markdown page into its sentences, table cells and
// headings. A paragraph or a list item is one block of prose, cut into
// sentences by splitSentences; fenced code, indented code (after a blank
// line, outside a list), HTML lines and lone images are skipped.
func readPageProse(page string) pageProse {
	var p pageProse
	var para []string
	flush := func() {
		if len(para) > 0 {
			text := strings.Join(para, " ")
			if !imageOnly.MatchString(text) {
				p.sentences = append(p.sentences, splitSentences(text)...)
			}
			para = nil
		}
	}
	fence := ""
	prevBlank, inList, inCode := true, false, false
	for _, line := range strings.Split(page, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if m := fenceStart.FindString(trimmed); m != "" {
			flush()
			fence = m
			continue
		}
		if trimmed == "" {
			flush()
			prevBlank = true
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		wasBlank := prevBlank
		prevBlank = false
		if indent >= 4 && !inList && (wasBlank || inCode) {
			inCode = true
			continue
		}
		inCode = false
		switch {
		case strings.HasPrefix(trimmed, "#"):
			flush()
			p.headings = append(p.headings, strings.TrimSpace(strings.TrimLeft(trimmed, "#")))
		case strings.HasPrefix(trimmed, "|"):
			flush()
			for _, c := range tableCells(trimmed) {
				if !tableRule.MatchString(c) {
					p.cells = append(p.cells, c)
				}
			}
		case htmlOnly.MatchString(trimmed) || strings.HasPrefix(trimmed, "<!--"):
			flush()
		case listItem.MatchString(trimmed):
			flush()
			inList = true
			para = append(para, listItem.ReplaceAllString(trimmed, ""))
		default:
			if wasBlank && indent == 0 {
				inList = false
			}
			para = append(para, strings.TrimSpace(strings.TrimPrefix(trimmed, ">")))
		}
	}
	flush()
	return p
}

// tableCells returns the trimmed cells of a table row: cells are cut at
// each | outside a code span that is not escaped as \|.
func tableCells(row string) []string {
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cell strings.Builder
	rs := []rune(row)
	for i := 0; i < len(rs); i++ {
		switch {
		case rs[i] == '\\' && i+1 < len(rs) && rs[i+1] == '|':
			cell.WriteString(`\|`)
			i++
		case rs[i] == '`':
			end := codeSpanEnd(rs, i)
			cell.WriteString(string(rs[i:end]))
			i = end - 1
		case rs[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteRune(rs[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// codeSpanEnd returns the index just past the code span opening at rs[i]
// (a run of backticks closed by a run of the same length), or just past the
// opening run when nothing closes it.
func codeSpanEnd(rs []rune, i int) int {
	n := 0
	for i+n < len(rs) && rs[i+n] == '`' {
		n++
	}
	for j := i + n; j < len(rs); {
		if rs[j] != '`' {
			j++
			continue
		}
		m := 0
		for j+m < len(rs) && rs[j+m] == '`' {
			m++
		}
		if m == n {
			return j + m
		}
		j += m
	}
	return i + n
}

// abbreviations end with a full stop that does not end the sentence.
var abbreviations = map[string]bool{"e.g.": true, "i.e.": true, "vs.": true, "cf.": true, "approx.": true, "no.": true}

// splitSentences cuts a block of prose into sentences. A sentence ends at
// '.', '!' or '?' (after any closing brackets, quotes or emphasis marks)
// followed by white space or the end of the block, unless the full stop
// ends an abbreviation or the next word starts in lower case. Full stops
// inside code spans, version numbers, file names and URLs are followed by
// no space, so they end nothing.
func splitSentences(block string) []string {
	var out []string
	rs := []rune(block)
	start := 0
	add := func(end int) {
		if s := strings.TrimSpace(string(rs[start:end])); s != "" {
			out = append(out, s)
		}
		start = end
	}
	for i := 0; i < len(rs); i++ {
		switch rs[i] {
		case '`':
			i = codeSpanEnd(rs, i) - 1
			continue
		case '.', '!', '?':
		default:
			continue
		}
		k := i + 1
		for k < len(rs) && strings.ContainsRune(`)]"'*_”’`, rs[k]) {
			k++
		}
		if k < len(rs) && !unicode.IsSpace(rs[k]) {
			continue
		}
		fields := strings.Fields(string(rs[start : i+1]))
		if rs[i] == '.' && len(fields) > 0 && abbreviations[strings.ToLower(strings.TrimLeft(fields[len(fields)-1], `("'[`))] {
			continue
		}
		next := k
		for next < len(rs) && unicode.IsSpace(rs[next]) {
			next++
		}
		if next < len(rs) && unicode.IsLower(rs[next]) {
			continue
		}
		add(k)
		i = k - 1
	}
	add(len(rs))
	return out
}

// The splitter cuts where a reader stops, and not at the full stops of
// code, abbreviations, versions or URLs.
func TestSentenceSplitterCutsWhereAReaderStops(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, block string
		want        []string
	}{
		{"plain", "One two. Three four! Five six? Seven.", []string{"One two.", "Three four!", "Five six?", "Seven."}},
		{"code span with dots", "Set `x.y. Z` and `a. B` here. Then go.", []string{"Set `x.y. Z` and `a. B` here.", "Then go."}},
		{"double-backtick span", "Run ``a ` b. C`` now. Done.", []string{"Run ``a ` b. C`` now.", "Done."}},
		{"e.g. and i.e.", "Use a pooler, e.g. PgBouncer, i.e. One of them. Next.", []string{"Use a pooler, e.g. PgBouncer, i.e. One of them.", "Next."}},
		{"version numbers", "Tested with pgbouncer 1.18 and RabbitMQ 3.13. Also 4.0.", []string{"Tested with pgbouncer 1.18 and RabbitMQ 3.13.", "Also 4.0."}},
		{"URLs and file names", "See https://example.com/a.b?c=d.e and docs/operations.md#traces for it. Next one.", []string{"See https://example.com/a.b?c=d.e and docs/operations.md#traces for it.", "Next one."}},
		{"lower case goes on", "About 5 ms. per call. Yes.", []string{"About 5 ms. per call.", "Yes."}},
		{"closing marks", "**Wakeup.** A relay wakes (at once.) Then \"it polls.\" End", []string{"**Wakeup.**", "A relay wakes (at once.)", "Then \"it polls.\"", "End"}},
		{"starts with code or digits", "It stops. `serve` exits 2. 40 covers it.", []string{"It stops.", "`serve` exits 2.", "40 covers it."}},
		{"colons and semicolons do not end", "One: two; three. Four", []string{"One: two; three.", "Four"}},
		{"unclosed backtick", "A ` stray. Next.", []string{"A ` stray.", "Next."}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, splitSentences(c.block))
		})
	}
}

// The page reader takes list items as prose, each its own block, and skips
// code blocks and table rows, whose cells it returns apart.
func TestPageReaderTakesProseAndCellsApart(t *testing.T) {
	t.Parallel()
	page := strings.Join([]string{
		"# Title. With a dot",
		"",
		"First line",
		"goes on. Second.",
		"",
		"```sh",
		"echo not. Prose.",
		"```",
		"",
		"    indented code. Not prose.",
		"",
		"- an item. Its second",
		"  sentence goes on.",
		"1. Step one.",
		"",
		"| a | b `x|y` | c \\| d |",
		"| --- | :-: | --- |",
		"",
		"![Console](console.png)",
		"",
		"> Quoted. Prose.",
	}, "\n")
	got := readPageProse(page)
	require.Equal(t, []string{"First line goes on.", "Second.", "an item.", "Its second sentence goes on.", "Step one.", "Quoted.", "Prose."}, got.sentences)
	require.Equal(t, []string{"a", "b `x|y`", `c \| d`}, got.cells)
	require.Equal(t, []string{"Title. With a dot"}, got.headings)
	require.Equal(t, fmt.Sprint([]string{"load average", "this shared machine", "run of 2026-12", "on 2026-12-03", "2026-12-03 run", "tried and not kept", "not in the repository", "this 2-core machine", "2 shared cores"}),
		fmt.Sprint(labNote.FindAllString("load average; this shared machine; the run of 2026-12-03; seen on 2026-12-03; the 2026-12-03 run; tried and not kept; not in the repository; this 2-core machine; 2 shared cores", -1)))
}
