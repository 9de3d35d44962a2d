package database

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// SHOW ENGINE INNODB STATUS says where purge is in the same words on MySQL
// 8 and MariaDB; a transaction's read view shows in its own line. Text
// without those lines, or with the hexadecimal numbers of MySQL 5.5, tells
// nothing.
func TestPurgeStateIsReadFromInnoDBStatus(t *testing.T) {
	t.Parallel()
	const mysql8 = `------------
TRANSACTIONS
------------
Trx id counter 44008348
Purge done for trx's n:o < 44008340 undo n:o < 7 state: running but idle
History list length 4
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 421967708637920, not started
0 lock struct(s), heap size 1136, 0 row lock(s)
`
	const mariadb = `------------
TRANSACTIONS
------------
Trx id counter 2041494
Purge done for trx's n:o < 2041362 undo n:o < 0 state: running
History list length 2
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 421311892175224, ACTIVE 3 sec
MariaDB thread id 31, OS thread handle 140, query id 96 localhost root
Trx read view will not see trx with id >= 2041400, sees < 2041400
`
	for name, c := range map[string]struct {
		status string
		want   purgeState
		ok     bool
	}{
		"mysql 8":     {mysql8, purgeState{nextTrx: 44008348, purgedBelow: 44008340, undoBelow: 7, history: 4}, true},
		"mariadb":     {mariadb, purgeState{nextTrx: 2041494, purgedBelow: 2041362, history: 2, readViews: true}, true},
		"no purge":    {"Trx id counter 5\nHistory list length 2\n", purgeState{}, false},
		"hexadecimal": {"Trx id counter 2100\nPurge done for trx's n:o < 1F15 undo n:o < 0\nHistory list length 423\n", purgeState{}, false},
		"empty":       {"", purgeState{}, false},
	} {
		got, ok, err := parsePurgeState(c.status)
		require.NoError(t, err, name)
		require.Equal(t, c.ok, ok, name)
		if ok {
			require.Equal(t, c.want, got, name)
		}
	}
}
