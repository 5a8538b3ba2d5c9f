# pepsi — build, test, install.
#
#   make [build]      bin/pepsi, version stamped from git describe
#   make test         gofmt check, go vet, staticcheck, man page lint,
#                     go test -race
#   make bench        bin/pepsi-bench (the bench module, bench/): pepsi's
#                     throughput, latencies, CPU and RSS against the
#                     database's own ceilings (BENCHFLAGS=... to size it),
#                     then its sustained step (SUSTAINED=10m for the long run)
#   make bench-go     the Go benchmarks, one iteration each (BENCHTIME=1x)
#   make bench-peers  bin/pepsi-bench-peers: pepsi beside River on the same
#                     server (BENCHPEERSFLAGS=... to size it)
#   make bench-vet    go vet of the bench module (make test leaves it out)
#   make install      PREFIX=/usr/local, DESTDIR honoured
#   make uninstall    removes what install installed
#   make deb          dist/pepsi_VERSION_ARCH.deb, the Debian package
#                     (scripts/deb, contrib/debian/; DIST=DIR elsewhere)
#   make man          check the hand-written man pages, render them in bin/man
#   make schema       sql/schema.sql, the schema of a freshly migrated database
#                     (pg_dump), which TestSchemaFile checks
#   make screenshot   docs/dashboard.png, from the dashboard's browser test
#   make clean        remove build outputs (not the private cluster:
#                     scripts/pg-local stop --clean does that)
#
# Tests need PostgreSQL. The DSN comes from scripts/test-dsn: PEPSI_TEST_DSN
# if set, else the local server on port 5432 if it lets us in without a
# password, else the private throwaway cluster from scripts/pg-local (started
# on demand and left running).

# Computed once (not on every use), unless given on the command line or in
# the environment.
ifeq ($(origin GO),undefined)
GO       := $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
endif
ifeq ($(origin GOFMT),undefined)
GOFMT    := $(shell command -v gofmt 2>/dev/null || echo $(dir $(GO))gofmt)
endif
ifeq ($(origin VERSION),undefined)
VERSION  := $(shell git describe --always --dirty 2>/dev/null || echo dev)
endif
LDFLAGS  := -X main.version=$(VERSION)
GOFLAGS_BUILD ?= -trimpath

PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
MANDIR   ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
ALIASES  := pepsi-dispatch pepsi-enqueue pepsi-queue pepsi-stats pepsi-migrate pepsi-httpd pepsi-doctor

PKGS      ?= ./...
MODULE    := github.com/pepsi-dev/pepsi
TESTFLAGS ?=
TIMEOUT   ?= 12m
BENCH     ?= .
BENCHTIME ?= 1x
BENCHFLAGS ?=
BENCHPEERSFLAGS ?=

# The race detector needs cgo and a C compiler; without one, say so and test
# without it (.ci/run installs gcc so CI always races).
# RACE= on the command line turns it off.
ifeq ($(origin RACE),undefined)
RACE = $(shell [ "$$($(GO) env CGO_ENABLED 2>/dev/null)" = 1 ] && command -v "$$($(GO) env CC 2>/dev/null || echo cc)" >/dev/null 2>&1 && echo -race)
endif

MAN1 := $(wildcard man/*.1)
MAN5 := $(wildcard man/*.5)
MAN7 := $(wildcard man/*.7)

.DEFAULT_GOAL := build
.PHONY: all build test fmt-check vet staticcheck lint-man man screenshot bench bench-go bench-peers bench-build bench-vet install uninstall deb clean demo

all: build

build:
	$(GO) build $(GOFLAGS_BUILD) -ldflags '$(LDFLAGS)' -o bin/pepsi ./cmd/pepsi

# gofmt over every .go file outside .git, bin, vendor and the private cluster.
# Each check of make test says its name as it starts ("==> NAME"), so that
# its minutes are never silent.
fmt-check:
	@echo "==> gofmt"
	@files=$$(find . \( -name .git -o -name .pg-local -o -name bin -o -name vendor \) -prune \
		-o -name '*.go' -type f -print); \
	if [ -z "$$files" ]; then echo "gofmt: no Go files"; exit 0; fi; \
	bad=$$($(GOFMT) -l $$files) || exit 1; \
	if [ -n "$$bad" ]; then \
		echo "gofmt: these files are not formatted (run: gofmt -w FILE):" >&2; \
		echo "$$bad" | sed 's/^/  /' >&2; exit 1; \
	fi; echo "gofmt: ok"

vet:
	@echo "==> go vet"
	$(GO) vet $(PKGS)

# staticcheck on PATH (or in GOPATH/bin) if there is one, else this version
# fetched from the Go module proxy and run; it stays out of go.mod.
# .ci/run installs it first (go install …@$(STATICCHECK_VERSION)).
STATICCHECK_VERSION ?= v0.8.2
staticcheck:
	@echo "==> staticcheck"
	@sc=$$(command -v staticcheck || ls "$$($(GO) env GOPATH)/bin/staticcheck" 2>/dev/null); \
	if [ -n "$$sc" ]; then echo "$$sc $(PKGS)"; "$$sc" $(PKGS); \
	else echo "staticcheck is not installed: go run fetches and builds it the first time (go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) puts it where make finds it)"; \
		echo "go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)"; \
		$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS); fi

lint-man:
	@echo "==> man pages"
	@bash scripts/lint-man

# The pages are written by hand in roff; "building" them is checking them:
# mandoc lint, then a Go test (no database) that fails when a command, flag,
# pepsi.conf key, statistics column or metric is missing from its page; then
# they are rendered as text into bin/man/ to read without installing.
man: lint-man
	$(GO) test -count=1 -run '^TestMan' ./pkg/app/
	@mkdir -p bin/man; \
	for p in $(MAN1) $(MAN5) $(MAN7); do \
		out=bin/man/$$(basename $$p).txt; \
		if command -v mandoc >/dev/null 2>&1; then mandoc -T utf8 $$p; else groff -t -man -Tutf8 $$p; fi \
			| sed 's/.\x08//g' > $$out || exit 1; \
	done; echo "man: pages rendered in bin/man/"

# The README's picture of the dashboard: the overview as pkg/dashboard's
# TestBrowser sees it in headless Chromium (apt-get install chromium).
screenshot:
	@dsn=$$(bash scripts/test-dsn) || exit 1; \
	PEPSI_TEST_DSN="$$dsn" PEPSI_DASHBOARD_SCREENSHOT='$(CURDIR)/docs/dashboard.png' \
		$(GO) test -count=1 -run '^TestBrowser$$' ./pkg/dashboard/ && echo "screenshot: docs/dashboard.png"

# sql/schema.sql: the schema pepsi of a new database on the test server,
# migrated, as that server's version of pg_dump prints it (TestSchemaFile
# in pkg/queue writes it, and otherwise fails while it differs).
.PHONY: schema
schema:
	@dsn=$$(bash scripts/test-dsn) || exit 1; \
	PEPSI_TEST_DSN="$$dsn" PEPSI_SCHEMA_WRITE=1 $(GO) test -count=1 -run '^TestSchemaFile$$' ./pkg/queue/ && \
	echo "schema: sql/schema.sql"

test: fmt-check vet staticcheck lint-man
	@race='$(RACE)'; if [ -z "$$race" ]; then echo "make test: WARNING: running WITHOUT -race (needs cgo and a C compiler: apt-get install -y gcc)" >&2; fi
	@dsn=$$(bash scripts/test-dsn) || exit 1; \
	echo "PEPSI_TEST_DSN=$$dsn"; \
	pkgs=$$($(GO) list $(PKGS)) || exit 1; \
	echo "==> go test $(RACE), packages: $$(echo "$$pkgs" | wc -l); it builds them first, then prints a line for each as it ends, in this order:"; \
	echo "   " $$(echo "$$pkgs" | sed 's|^$(MODULE)/*||; s|^$$|.|'); \
	PEPSI_TEST_DSN="$$dsn" $(GO) test $(RACE) -count=1 -timeout $(TIMEOUT) $(TESTFLAGS) $(PKGS)

# The bench module (bench/, a Go module of its own: River stays out of
# go.mod, and ./... above neither builds nor tests it): pepsi-bench and
# pepsi-bench-peers, built into bin/ beside bin/pepsi, whose dispatcher
# they measure.
bench-build: build
	cd bench && $(GO) build $(GOFLAGS_BUILD) -o ../bin/ ./cmd/pepsi-bench ./cmd/pepsi-bench-peers

bench-vet:
	cd bench && $(GO) vet ./...

# pepsi-bench on a database of its own (pepsi_bench, dropped afterwards) on
# the test server, measuring bin/pepsi (PEPSI_BENCH_EXE=PATH measures
# another build's); a few minutes on a 2-core machine, then, unless
# BENCHFLAGS says otherwise, its sustained step for SUSTAINED (4m; the
# issue's run is 10m). See bench/man/pepsi-bench.1.
SUSTAINED ?= 4m
bench: bench-build
	@dsn=$$(bash scripts/test-dsn) || exit 1; \
	echo "PEPSI_DSN=$$dsn"; uptime; \
	pepsi=$${PEPSI_BENCH_EXE:-bin/pepsi}; \
	PEPSI_DSN="$$dsn" PEPSI_CONFIG= bin/pepsi-bench --pepsi "$$pepsi" $(BENCHFLAGS) || exit 1; \
	if [ -z "$(BENCHFLAGS)" ]; then \
		PEPSI_DSN="$$dsn" PEPSI_CONFIG= bin/pepsi-bench --pepsi "$$pepsi" --only sustained --sustained-time $(SUSTAINED); \
	fi

bench-go:
	@dsn=$$(bash scripts/test-dsn) || exit 1; \
	echo "PEPSI_TEST_DSN=$$dsn"; \
	PEPSI_TEST_DSN="$$dsn" $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(TESTFLAGS) $(PKGS)

# pepsi beside River (github.com/riverqueue/river) on the test server, each
# on a database of its own: bin/pepsi-bench-peers, given bin/pepsi and
# bin/pepsi-bench. About 5 minutes with the defaults on a 2-core machine;
# see bench/cmd/pepsi-bench-peers/README.md.
bench-peers: bench-build
	@dsn=$$(bash scripts/test-dsn) || exit 1; \
	echo "PEPSI_DSN=$$dsn"; uptime; \
	PEPSI_DSN="$$dsn" PEPSI_CONFIG= bin/pepsi-bench-peers --pepsi bin/pepsi --pepsi-bench bin/pepsi-bench $(BENCHPEERSFLAGS)

install: build
	install -d '$(DESTDIR)$(BINDIR)'
	install -m 0755 bin/pepsi '$(DESTDIR)$(BINDIR)/pepsi'
	for n in $(ALIASES); do ln -sfn pepsi '$(DESTDIR)$(BINDIR)'/$$n || exit 1; done
	install -d '$(DESTDIR)$(BASHCOMPDIR)' '$(DESTDIR)$(ZSHCOMPDIR)'
	install -m 0644 contrib/completion/pepsi.bash '$(DESTDIR)$(BASHCOMPDIR)/pepsi'
	for n in $(ALIASES); do ln -sfn pepsi '$(DESTDIR)$(BASHCOMPDIR)'/$$n || exit 1; done
	install -m 0644 contrib/completion/_pepsi '$(DESTDIR)$(ZSHCOMPDIR)/_pepsi'
ifneq ($(MAN1),)
	install -d '$(DESTDIR)$(MANDIR)/man1'
	install -m 0644 $(MAN1) '$(DESTDIR)$(MANDIR)/man1/'
endif
ifneq ($(MAN5),)
	install -d '$(DESTDIR)$(MANDIR)/man5'
	install -m 0644 $(MAN5) '$(DESTDIR)$(MANDIR)/man5/'
endif
ifneq ($(MAN7),)
	install -d '$(DESTDIR)$(MANDIR)/man7'
	install -m 0644 $(MAN7) '$(DESTDIR)$(MANDIR)/man7/'
endif

uninstall:
	rm -f '$(DESTDIR)$(BINDIR)/pepsi' $(foreach n,$(ALIASES),'$(DESTDIR)$(BINDIR)/$(n)')
	rm -f '$(DESTDIR)$(BASHCOMPDIR)/pepsi' $(foreach n,$(ALIASES),'$(DESTDIR)$(BASHCOMPDIR)/$(n)') \
	      '$(DESTDIR)$(ZSHCOMPDIR)/_pepsi'
	rm -f $(foreach p,$(MAN1),'$(DESTDIR)$(MANDIR)/man1/$(notdir $(p))') \
	      $(foreach p,$(MAN5),'$(DESTDIR)$(MANDIR)/man5/$(notdir $(p))') \
	      $(foreach p,$(MAN7),'$(DESTDIR)$(MANDIR)/man7/$(notdir $(p))')

# The Debian package, built with dpkg-deb from the same VERSION as make
# build (its own binary: static and stripped); see contrib/debian/README.md.
DIST ?= dist
deb:
	@GO='$(GO)' VERSION='$(VERSION)' bash scripts/deb '$(DIST)'

clean:
	rm -rf bin dist cover.out coverage.out *.test *.prof

# The demo pipeline (contrib/demo) on the server of PEPSI_DSN, else on the
# private cluster; see scripts/demo.
demo:
	@GO='$(GO)' bash scripts/demo
