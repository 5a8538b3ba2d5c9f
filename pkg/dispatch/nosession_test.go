package dispatch

import (
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// TestLoopHoldsNoSession: the loop cannot wait on the database because it
// holds no session to run a statement on. Nothing reachable from the
// Dispatcher's fields but through a channel (which hands a session on to
// the goroutine that owns it) is a pool, a connection or a listener.
func TestLoopHoldsNoSession(t *testing.T) {
	banned := map[reflect.Type]bool{
		reflect.TypeFor[*queue.DB]():       true,
		reflect.TypeFor[*queue.Listener](): true,
		reflect.TypeFor[*pgxpool.Pool]():   true,
		reflect.TypeFor[*pgx.Conn]():       true,
	}
	seen := map[reflect.Type]bool{}
	var walk func(ty reflect.Type, path string)
	walk = func(ty reflect.Type, path string) {
		if banned[ty] {
			t.Errorf("Dispatcher%s is a %s: the loop could run a statement", path, ty)
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
	walk(reflect.TypeFor[Dispatcher](), "")
	if len(seen) < 20 {
		t.Fatalf("walked %d types: the walk is broken", len(seen))
	}
}
