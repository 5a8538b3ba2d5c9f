package config

import (
	"reflect"
	"testing"
)

func TestHTTPDSection(t *testing.T) {
	c, err := Parse("/etc/pepsi/pepsi.conf", []byte("[pepsi-httpd]\nWEB_CONFIG_FILE = web.yml\nACTION_USERS = alice, bob carol\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := HTTPD{WebConfigFile: "/etc/pepsi/web.yml", WebConfigLine: 2, ActionUsers: []string{"alice", "bob", "carol"}, ActionUsersLine: 3}
	if !reflect.DeepEqual(c.HTTPD, want) {
		t.Errorf("got %+v\nwant %+v", c.HTTPD, want)
	}
	if c := mustParse(t, "[pepsi-httpd]\nWEB_CONFIG_FILE = /srv/web.yml\n"); c.HTTPD.WebConfigFile != "/srv/web.yml" || c.HTTPD.ActionUsers != nil {
		t.Errorf("absolute path: %+v", c.HTTPD)
	}
	if c := mustParse(t, specExample); !reflect.DeepEqual(c.HTTPD, HTTPD{}) {
		t.Errorf("no section: %+v", c.HTTPD)
	}
	for src, want := range map[string]string{
		"[pepsi-httpd]\nACTION_USERS = al:ice\n":              `pepsi.conf:2: ACTION_USERS: bad user name "al:ice" (a basic-auth user name has no ':')`,
		"[pepsi-httpd]\nLISTEN = :9188\n":                     `pepsi.conf:2: unknown key "LISTEN" in [pepsi-httpd]`,
		"[pepsi-httpd]\nweb_config_file = x\n":                `pepsi.conf:2: unknown key "web_config_file" in [pepsi-httpd] (did you mean "WEB_CONFIG_FILE"? keys are upper case)`,
		"[pepsi-httpd]\n[pepsi-httpd]\n":                      `pepsi.conf:2: duplicate section [pepsi-httpd] (first at line 1)`,
		"[pepsi-httpd]\nACTION_USERS = a\nACTION_USERS = b\n": `pepsi.conf:3: duplicate key "ACTION_USERS" in [pepsi-httpd] (first at line 2)`,
	} {
		_, err := Parse("pepsi.conf", []byte(src))
		if err == nil || err.Error() != want {
			t.Errorf("%q: got %v, want %s", src, err, want)
		}
	}
}
