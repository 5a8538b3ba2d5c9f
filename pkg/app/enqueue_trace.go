package app

import (
	"github.com/urfave/cli/v2"

	ptrace "github.com/pepsi-dev/pepsi/pkg/trace"
)

// traceHeaders adds --traceparent and --tracestate (or $TRACEPARENT and
// $TRACESTATE) to headers as the headers traceparent and tracestate.
func traceHeaders(c *cli.Context, headers map[string]string) (map[string]string, error) {
	tp, ts := c.String("traceparent"), c.String("tracestate")
	if tp == "" {
		if c.IsSet("tracestate") && ts != "" {
			return nil, usage("--tracestate without --traceparent (or $%s)", ptrace.EnvParent)
		}
		return headers, nil
	}
	if _, ok := ptrace.Parse(tp, ""); !ok {
		return nil, usage("--traceparent (or $%s) %q: not a W3C traceparent (VERSION-TRACEID-SPANID-FLAGS, such as 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01)", ptrace.EnvParent, tp)
	}
	if _, dup := headers[ptrace.HeaderParent]; dup {
		return nil, usage("--traceparent and --header %s= both given", ptrace.HeaderParent)
	}
	if headers == nil {
		headers = make(map[string]string, 2)
	}
	headers[ptrace.HeaderParent] = tp
	if ts != "" {
		headers[ptrace.HeaderState] = ts
	}
	return headers, nil
}
