package dispatch

import (
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// reachable reports, through report, every field path from root (named
// name) whose type is banned. The walk follows pointers, slices, arrays,
// maps and structs; not channels (which hand a value on to the goroutine
// that owns it), functions or interfaces (so an interface that reaches a
// banned type must be banned itself). It returns how many types it saw.
func reachable(root reflect.Type, name string, banned map[reflect.Type]bool, report func(path string, ty reflect.Type)) int {
	seen := map[reflect.Type]bool{}
	var walk func(ty reflect.Type, path string)
	walk = func(ty reflect.Type, path string) {
		if banned[ty] {
			report(path, ty)
			return
		}
		if seen[ty] {
			return
		}
		seen[ty] = true
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(ty.Elem(), path+"[]")
		case reflect.Map:
			walk(ty.Key(), path+"{key}")
			walk(ty.Elem(), path+"{}")
		case reflect.Struct:
			for f := range ty.Fields() {
				walk(f.Type, path+"."+f.Name)
			}
		}
	}
	walk(root, name)
	return len(seen)
}

// TestLoopHoldsNoSession: the loop cannot wait on the database because it
// holds no session to run a statement on. Nothing reachable from the
// Dispatcher's fields but through a channel (which hands a session on to
// the goroutine that owns it) is a pool, a connection, a listener, a
// store or a service (which holds one).
func TestLoopHoldsNoSession(t *testing.T) {
	banned := map[reflect.Type]bool{
		reflect.TypeFor[*queue.DB]():       true,
		reflect.TypeFor[*queue.Listener](): true,
		reflect.TypeFor[*pgxpool.Pool]():   true,
		reflect.TypeFor[*pgx.Conn]():       true,
		reflect.TypeFor[Store]():           true,
		reflect.TypeFor[LockSession]():     true,
		reflect.TypeFor[startStore]():      true,
		reflect.TypeFor[turnStore]():       true,
		reflect.TypeFor[choreStore]():      true,
		reflect.TypeFor[retentionStore]():  true,
		reflect.TypeFor[vacuumStore]():     true,
		reflect.TypeFor[service]():         true,
		reflect.TypeFor[retention]():       true,
		reflect.TypeFor[vacuum]():          true,
	}
	n := reachable(reflect.TypeFor[Dispatcher](), "Dispatcher", banned, func(path string, ty reflect.Type) {
		t.Errorf("%s is a %s: the loop could run a statement", path, ty)
	})
	if n < 20 {
		t.Fatalf("walked %d types: the walk is broken", n)
	}
}

// TestServicesShareNoLoopState: the janitor's services run on goroutines
// of their own beside the loop, which owns its state without locks.
// Nothing reachable from a service but through a channel is the loop's:
// the Dispatcher, a pool, a worker, the statistics not yet written.
func TestServicesShareNoLoopState(t *testing.T) {
	banned := map[reflect.Type]bool{
		reflect.TypeFor[Dispatcher](): true,
		reflect.TypeFor[pool]():       true,
		reflect.TypeFor[worker]():     true,
		reflect.TypeFor[tally]():      true,
	}
	for _, s := range []reflect.Type{reflect.TypeFor[retention](), reflect.TypeFor[vacuum]()} {
		n := reachable(s, s.Name(), banned, func(path string, ty reflect.Type) {
			t.Errorf("%s is a %s: a service would share the loop's state", path, ty)
		})
		if n < 5 {
			t.Fatalf("walked %d types from %s: the walk is broken", n, s)
		}
	}
}
