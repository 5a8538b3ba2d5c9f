package app

import "path/filepath"

// aliases maps the names pepsi may be called by (a symlink per command,
// busybox style) to the subcommand they stand for.
var aliases = map[string]string{
	"pepsi-dispatch": "dispatch",
	"pepsi-enqueue":  "enqueue",
	"pepsi-queue":    "queue",
	"pepsi-stats":    "stats",
	"pepsi-migrate":  "migrate",
	"pepsi-httpd":    "httpd",
	"pepsi-doctor":   "doctor",
}

// resolveAlias rewrites an argv whose argv[0] is an alias into the plain
// form: ["/usr/bin/pepsi-migrate", "status"] becomes
// ["pepsi", "migrate", "status"]. Any other argv is returned unchanged and
// dispatched on argv[1] as usual.
func resolveAlias(args []string) []string {
	if len(args) == 0 {
		return []string{"pepsi"}
	}
	if cmd, ok := aliases[filepath.Base(args[0])]; ok {
		return append([]string{"pepsi", cmd}, args[1:]...)
	}
	return args
}
