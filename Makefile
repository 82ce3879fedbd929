# Everything a fresh machine needs comes from here: only node and npm are assumed.
BUN_VERSION := 1.4.5
BUN := node_modules/.bin/bun
STAMP := node_modules/.sluice-installed

.PHONY: run test build bench bytecode-order soak soak-shared install clean chromium wrk shared-services agents format

# Formats every file and applies the linter's safe fixes (make test fails on what is left).
format: $(STAMP)
	node_modules/.bin/biome check --write .

run: $(STAMP)
	$(BUN) src/main.ts serve

test: $(STAMP) chromium wrk shared-services
	node_modules/.bin/biome check --error-on-warnings .
	node_modules/.bin/tsc --noEmit -p .
	node_modules/.bin/tsc --noEmit -p src/modules/console/ui
	$(BUN) test --timeout 20000

build: dist/sluice

# The executable carries its modules as bytecode (start-up to the first answer ~70 ms instead of ~180), laid out by
# what a recorded start runs (src/bytecode-order.txt), so the bytecode a server never runs is never paged in. The
# CLI, the ledger's writer thread and the tokenizer are entry points of their own, loaded only when used.
dist/sluice: $(STAMP) $(shell find src -type f)
	$(BUN) build --compile --bytecode --bytecode-order src/bytecode-order.txt --format=esm --minify --sourcemap src/main.ts src/cli/run.ts src/ledger/ledger-worker.ts src/tokens/tokenizer-worker.ts --outfile dist/sluice

bench: $(STAMP) wrk shared-services
	BUN_CONFIG_MAX_HTTP_REQUESTS=65535 $(BUN) bench/run.ts
	BUN_CONFIG_MAX_HTTP_REQUESTS=65535 $(BUN) bench/shared.ts
	$(BUN) bench/request-log.ts
	$(BUN) bench/ledger-pages.ts
	$(BUN) bench/promotion.ts
	$(BUN) bench/gc-pauses.ts

# Re-records src/bytecode-order.txt from a start of the current executable (see bench/bytecode-order.ts).
bytecode-order: $(STAMP)
	$(BUN) bench/bytecode-order.ts

soak: $(STAMP)
	BUN_CONFIG_MAX_HTTP_REQUESTS=65535 $(BUN) bench/soak.ts --seconds 600

soak-shared: $(STAMP) shared-services
	BUN_CONFIG_MAX_HTTP_REQUESTS=65535 $(BUN) bench/soak.ts --seconds 600 --shared

install: $(STAMP)

# Drives the real coding agents (Claude Code, Codex CLI) against a local Sluice, offline; ~640 MB of npm packages,
# installed beside the script, so it is not part of `make test`.
AGENTS := test/agents/.installed
agents: $(STAMP)
	@[ -x $(AGENTS)/node_modules/.bin/claude ] && [ -x $(AGENTS)/node_modules/.bin/codex ] || \
		npm install --prefix $(AGENTS) --no-save --no-package-lock --no-audit --no-fund --loglevel=error @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0
	$(BUN) test/agents/drive-agents.ts

# Bun itself comes from npm: a bootstrap copy first (only node and npm are assumed), which then installs
# everything from bun.lock, including the `bun` devDependency that every other target uses.
BOOTSTRAP := node_modules/.bootstrap
$(STAMP): package.json bun.lock
	@[ -x $(BUN) ] || npm install --prefix $(BOOTSTRAP) --no-save --no-package-lock --no-audit --no-fund --loglevel=error bun@$(BUN_VERSION)
	@if [ -x $(BUN) ]; then $(BUN) install --frozen-lockfile; else $(BOOTSTRAP)/node_modules/.bin/bun install --frozen-lockfile; fi
	@touch $(STAMP)

# The console's browser tests drive Debian's Chromium (never a downloaded browser).
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null) || (sudo apt-get update -qq >/dev/null && sudo apt-get install -y -qq chromium >/dev/null)

# The load generator of every closed loop in bench/ (the benchmark runners' smoke runs are part of make test).
wrk:
	@command -v wrk >/dev/null || (apt-get update -qq >/dev/null && apt-get install -y -qq wrk >/dev/null) || (sudo apt-get update -qq >/dev/null && sudo apt-get install -y -qq wrk >/dev/null)

# The shared-mode tests start their own PostgreSQL and Redis (Debian's servers) on loopback ports with temporary data
# directories; only the packages are needed. Debian's postgresql package may start a cluster of its own: it is
# stopped, as nothing uses it.
shared-services:
	@(command -v redis-server >/dev/null && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1) || \
		( (apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server >/dev/null) || \
		  (sudo apt-get update -qq >/dev/null && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql redis-server >/dev/null) ) && \
		( (service postgresql stop >/dev/null 2>&1; service redis-server stop >/dev/null 2>&1) || true )

clean:
	rm -rf dist node_modules
