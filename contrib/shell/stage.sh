#!/bin/sh
# contrib/shell/stage.sh — an example pepsi stage program in POSIX sh + psql.
#
# It does exactly what contrib/go/stage and contrib/python/stage.py do:
#   - adds the header STAGE = "sh" to the message (work in its transaction);
#   - fails an empty payload: "empty payload";
#   - pauses the payload "retry" for a second on its first attempt at a stage;
#   - otherwise advances the message to the stage given by --next, or
#     finishes it when there is none.
#
# In pepsi.conf:
#   [stage-parse]
#   PROGRAM = /usr/local/lib/pepsi/stage.sh --next deliver
#
# The protocol (pepsi-worker(7)): one message id per line on stdin, exactly
# one status line per id on stdout, in order: "0" once the message has been
# moved (advanced, finished, paused or failed) in a committed transaction,
# "1 # reason" when this pass failed. Everything else goes to stderr.
#
# One psql per message: POSIX sh has no coprocesses, so this example
# connects to the database for every message (PEPSI_DSN, set by the
# dispatcher). That costs a connection setup per message — fine for an
# example or a low-volume stage; for throughput use one long-lived
# connection, as the Go and Python examples do.
#
# SIGTERM (the dispatcher stopping) kills the script and its psql; the
# server rolls the open transaction back and the dispatcher requeues the
# message. EOF on stdin ends the loop: exit 0.
set -u

next=""
while [ $# -gt 0 ]; do
	case $1 in
	-c) shift 2 ;; # the dispatcher's CONFIG_FILE: this script needs only PEPSI_DSN
	--next) next=${2-}; shift 2 ;;
	*) echo "usage: stage.sh [--next STAGE] [-c CONFIG_FILE]" >&2; exit 2 ;;
	esac
done
: "${PEPSI_DSN:?PEPSI_DSN is not set (the dispatcher sets it)}"
: "${PEPSI_STAGE:?PEPSI_STAGE is not set (the dispatcher sets it)}"

# The pass for one message, as one psql script in one transaction.
# ON_ERROR_STOP makes any error exit psql non-zero before COMMIT, so
# nothing is committed. \gset fails when the row is not there or not
# running. :'name' is a quoted literal, :name the bare value (the id is
# checked to be digits below).
pass='
\set ON_ERROR_STOP on
BEGIN;
SELECT m.payload = $$$$ AS empty,
       (m.payload = $$retry$$ AND s.attempts = 1) AS retry
  FROM pepsi.state s, pepsi.message_row(s.id) m
 WHERE s.id = :id AND s.status = $$running$$
   FOR UPDATE OF s
\gset
UPDATE pepsi.message SET headers = headers || jsonb_build_object(:'\''stage'\''::text, $$sh$$)
 WHERE id = :id;
\if :empty
  SELECT pepsi.fail(:id, $$empty payload$$);
\elif :retry
  SELECT pepsi.pause(:id, $$1 second$$);
\elif :{?next}
  SELECT pepsi.advance(:id, :'\''next'\'');
\else
  SELECT pepsi.finish(:id);
\endif
COMMIT;
'

while IFS= read -r id; do
	case $id in
	'' | *[!0-9]*)
		echo "stage.sh: bad message id '$id'" >&2
		echo "1 # bad message id"
		continue
		;;
	esac
	set -- -v id="$id" -v stage="$PEPSI_STAGE"
	[ -n "$next" ] && set -- "$@" -v next="$next"
	# psql's own output is thrown away: stdout is the protocol channel.
	# Its errors are kept for the status line.
	if err=$(printf '%s' "$pass" | psql -X -q -w -d "$PEPSI_DSN" "$@" 2>&1 >/dev/null); then
		echo 0
	elif [ $? -eq 2 ]; then
		# psql's 2: the connection went bad. Not the message's fault: 75
		# puts it back without counting the pass (pepsi-worker(7)).
		err=$(printf '%s' "$err" | tr '\n' ' ')
		echo "stage.sh: message $id not run: $err" >&2
		echo "75 # not run: ${err:-connection lost}"
	else
		err=$(printf '%s' "$err" | tr '\n' ' ')
		case $err in
		*'no rows returned for \gset'*) err="message $id is not running" ;;
		esac
		echo "stage.sh: message $id: $err" >&2
		echo "1 # ${err:-psql failed}"
	fi
done
exit 0
