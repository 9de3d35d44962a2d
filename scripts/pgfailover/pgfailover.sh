#!/bin/sh
# pgfailover.sh: a PostgreSQL 15 primary and a synchronous streaming standby
# on this machine, each with its own data directory under DIR and its own
# loopback port, for failover tests. It never touches another cluster (the
# shared 5432 one included): the clusters are made with Debian's initdb and
# pg_basebackup binaries, not registered with pg_createcluster, and run as the
# postgres user when started by root.
#
#   pgfailover.sh up DIR PRIMARY_PORT STANDBY_PORT   make and start both
#   pgfailover.sh kill-primary DIR                   kill -9 the primary's postmaster
#   pgfailover.sh promote DIR                        promote the standby (and stop
#                                                    it waiting for a standby of its own)
#   pgfailover.sh rejoin DIR                         bring the old primary back as a
#                                                    standby of the new one (a fresh copy)
#   pgfailover.sh down DIR                           stop both, remove DIR
#
# synchronous_standby_names names the standby, so a commit returns only once
# the standby has its WAL (synchronous_commit=on).
set -eu

BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}

as_pg() {
	if [ "$(id -u)" = 0 ]; then
		setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
	else
		"$@"
	fi
}

up() {
	dir=$1 pport=$2 sport=$3
	mkdir -p "$dir"
	echo "$sport" >"$dir/standby.port"
	echo "$pport" >"$dir/primary.port"
	[ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
	as_pg "$BIN/initdb" -D "$dir/primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
	cat >>"$dir/primary/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $pport
unix_socket_directories = '$dir'
wal_level = replica
max_wal_senders = 4
max_connections = 40
synchronous_standby_names = 'standby'
synchronous_commit = on
fsync = off
CONF
	echo "host replication postgres 127.0.0.1/32 trust" >>"$dir/primary/pg_hba.conf"
	as_pg "$BIN/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null
	as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$dir/standby" -R -X stream -c fast \
		-d "host=127.0.0.1 port=$pport user=postgres application_name=standby"
	cat >>"$dir/standby/postgresql.conf" <<CONF
port = $sport
CONF
	as_pg "$BIN/pg_ctl" -D "$dir/standby" -l "$dir/standby.log" -w start >/dev/null
	# Wait until the standby streams synchronously.
	i=0
	until [ "$(as_pg "$BIN/psql" -h 127.0.0.1 -p "$pport" -U postgres -Atc \
		"SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync'" 2>/dev/null || echo 0)" = 1 ]; do
		i=$((i + 1))
		[ $i -gt 100 ] && { echo "standby never became synchronous" >&2; exit 1; }
		sleep 0.1
	done
}

postmaster_pid() { head -1 "$1/postmaster.pid"; }

case "${1:-}" in
up) shift; up "$@" ;;
kill-primary)
	# The postmaster and its children at once, as a machine that dies.
	pm=$(postmaster_pid "$2/primary")
	kill -9 "$pm" $(ps -o pid= --ppid "$pm") 2>/dev/null || true
	;;
promote)
	as_pg "$BIN/pg_ctl" -D "$2/standby" -w promote >/dev/null
	# The new primary inherited synchronous_standby_names from the old one,
	# and has no standby: every commit would wait for one forever. A
	# failover manager (Patroni, pg_auto_failover) does the same.
	as_pg "$BIN/psql" -h 127.0.0.1 -p "$(cat "$2/standby.port")" -U postgres -qAtc \
		"ALTER SYSTEM SET synchronous_standby_names = ''" -c "SELECT pg_reload_conf()" >/dev/null
	;;
rejoin)
	dir=$2
	rm -rf "$dir/primary"
	as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$(cat "$dir/standby.port")" -U postgres -D "$dir/primary" -R -X stream -c fast \
		-d "host=127.0.0.1 port=$(cat "$dir/standby.port") user=postgres application_name=oldprimary"
	cat >>"$dir/primary/postgresql.conf" <<CONF
port = $(cat "$dir/primary.port")
synchronous_standby_names = ''
CONF
	as_pg "$BIN/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null
	;;
down)
	for c in primary standby; do
		[ -f "$2/$c/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$2/$c" -m immediate stop >/dev/null 2>&1 || true
	done
	rm -rf "$2"
	;;
*) echo "usage: $0 up DIR PRIMARY_PORT STANDBY_PORT | kill-primary DIR | promote DIR | rejoin DIR | down DIR" >&2; exit 2 ;;
esac
