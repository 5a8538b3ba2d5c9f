package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
	"golang.org/x/crypto/bcrypt"
)

// Auth is who may use the dashboard's actions: the ActionUsers among the
// basic-auth users of a web configuration file.
//
// The file is the Prometheus exporters' web configuration, which WebServe
// applies to every request (TLS, basic auth) and reads again for each
// one, so that users can be changed without a restart; Auth reads it again
// too. A request's user is the one its basic-auth header names, trusted
// only while the file has users (exporter-toolkit has then checked the
// password before the dashboard sees the request); an action checks the
// password once more itself, so that a file that has just lost its users
// lets nobody act.
type Auth struct {
	file   string
	actors []string
}

// webUsers is the part of a web configuration file that Auth reads.
type webUsers struct {
	Users map[string]string `yaml:"basic_auth_users"`
}

// CheckWebConfig checks a web configuration file as WebServe will use it:
// its syntax, its users' bcrypt hashes, its TLS certificate and key.
func CheckWebConfig(file string) error {
	if file == "" {
		return nil
	}
	return web.Validate(file)
}

// NewAuth returns who may act: actors, each of whom must be a user of the
// web configuration file (checked by CheckWebConfig). file "" is no web
// configuration: no TLS, no authentication, and nobody may act.
func NewAuth(file string, actors []string) (*Auth, error) {
	if file == "" {
		if len(actors) > 0 {
			return nil, errors.New("users who may act need a web configuration file with basic_auth_users")
		}
		return &Auth{}, nil
	}
	users, err := readUsers(file)
	if err != nil {
		return nil, err
	}
	for _, a := range actors {
		if _, ok := users[a]; !ok {
			known := make([]string, 0, len(users))
			for u := range users {
				known = append(known, u)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("%q is not a user of %s (its basic_auth_users: %s)", a, file, strings.Join(known, ", "))
		}
	}
	return &Auth{file: file, actors: slices.Clone(actors)}, nil
}

// WebConfigFile is the web configuration file, "" for none.
func (a *Auth) WebConfigFile() string {
	if a == nil {
		return ""
	}
	return a.file
}

// readUsers reads the basic-auth users of a web configuration file.
func readUsers(file string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var w webUsers
	if err := yaml.Unmarshal(data, &w); err != nil {
		return nil, err
	}
	return w.Users, nil
}

// user is the authenticated user of r, "" when there is none (no web
// configuration, or one without users).
func (a *Auth) user(r *http.Request) string {
	if a == nil || a.file == "" {
		return ""
	}
	name, _, ok := r.BasicAuth()
	if !ok {
		return ""
	}
	users, err := readUsers(a.file)
	if err != nil {
		return ""
	}
	if _, ok := users[name]; !ok {
		return ""
	}
	return name
}

// mayAct reports whether user may use the actions.
func (a *Auth) mayAct(user string) bool {
	return a != nil && user != "" && slices.Contains(a.actors, user)
}

// verify checks r's basic-auth password against the file itself: the
// last word before an action.
func (a *Auth) verify(r *http.Request) bool {
	name, pass, ok := r.BasicAuth()
	if !ok || a == nil || a.file == "" {
		return false
	}
	users, err := readUsers(a.file)
	if err != nil {
		return false
	}
	hash, ok := users[name]
	return ok && bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) == nil
}

// canAct reports whether r may use the actions, and names its user.
func (a *Auth) canAct(r *http.Request) (string, bool) {
	u := a.user(r)
	return u, a.mayAct(u)
}
