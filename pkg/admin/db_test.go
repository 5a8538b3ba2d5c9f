package admin_test

import (
	"reflect"
	"testing"

	"github.com/pepsi-dev/pepsi/pkg/admin"
)

// TestDBEmbedsNothing: every method of admin.DB is declared in this
// package, so that its type says all it offers.
func TestDBEmbedsNothing(t *testing.T) {
	ty := reflect.TypeFor[admin.DB]()
	for i := range ty.NumField() {
		if f := ty.Field(i); f.Anonymous {
			t.Errorf("admin.DB embeds %s", f.Type)
		}
	}
}
