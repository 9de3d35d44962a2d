package nodetest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/postingsvc/posting/internal/platform/nodetest"
)

// TestRunReadsThePinnedPackages loads every pinned package from node_modules
// and reads their versions, so a lock file that no longer installs them, or
// one that drifted from package.json, fails here first.
func TestRunReadsThePinnedPackages(t *testing.T) {
	res := nodetest.Run(t, time.Minute, nil, "-e", `
const want = require('./package.json').devDependencies;
for (const [name, version] of Object.entries(want)) {
  const got = require('./node_modules/' + name + '/package.json').version;
  if (got !== version) { console.error(name + ' is ' + got + ', package.json pins ' + version); process.exit(3); }
  console.log(name + '@' + got);
}`)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	require.Contains(t, res.Stdout, "kafkajs@2.2.4")
	require.Equal(t, 8, len(strings.Fields(res.Stdout)), res.Stdout)
}
