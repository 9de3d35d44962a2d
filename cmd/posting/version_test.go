package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// posting version prints the module and the VCS revision the binary was
// built from (Go's build info), here the checkout's HEAD.
func TestVersionPrintsTheModuleAndTheRevision(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, nil, "version")
	require.Equal(t, 0, code, out)
	require.True(t, strings.HasPrefix(out, "github.com/postingsvc/posting "), out)
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Logf("not a git checkout (%v): the revision is not checked", err)
		return
	}
	require.Contains(t, out, "revision "+strings.TrimSpace(string(head)))
}
