# Everything a fresh machine needs comes from here: only node and npm are assumed.
BUN_VERSION := 1.4.5
BUN := node_modules/.bin/bun
STAMP := node_modules/.sluice-installed

.PHONY: run test build bench install clean

run: $(STAMP)
	$(BUN) src/main.ts serve

test: $(STAMP)
	$(BUN) test --timeout 20000

build: dist/sluice

dist/sluice: $(STAMP) $(shell find src -type f)
	$(BUN) build --compile --minify --sourcemap src/main.ts --outfile dist/sluice

bench: $(STAMP)
	@echo "benchmarks: see issue 6 (bench/ is not written yet)"; exit 1

install: $(STAMP)

# Bun itself comes from npm (the `bun` devDependency); then Bun installs the rest from bun.lock.
$(STAMP): package.json bun.lock
	@[ -x $(BUN) ] || npm install --no-save --no-package-lock --no-audit --no-fund bun@$(BUN_VERSION)
	$(BUN) install --frozen-lockfile
	@touch $(STAMP)

clean:
	rm -rf dist node_modules
