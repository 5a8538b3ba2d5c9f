// Package contrib holds example pepsi stage programs, one per language,
// that all do the same thing so they can be compared line by line:
//
//	go/stage       Go, on pkg/worker: one function and worker.Main
//	shell/stage.sh POSIX sh and psql, calling the SQL API
//	python/stage.py Python 3 on the package pepsi-stage (contrib/python, psycopg2)
//	node/example/stage.ts TypeScript on the package @pepsi/stage (contrib/node, pg)
//
// the demo pipeline that `make demo` runs (demo/), and the configuration
// of README's "A pipeline of your own" (pipeline/pepsi.conf, two stages of
// go/stage). The tests in this directory run each example under a real
// dispatcher, and follow that README section. debian/ holds the Debian
// package's own files (make deb; TestDeb builds and checks the package).
//
// Each example adds the header STAGE = LANGUAGE to the message it is
// given, fails an empty payload ("empty payload"), pauses the payload
// "retry" for a second on its first attempt at a stage, and otherwise
// advances the message to the stage named by --next, or finishes it.
package contrib
