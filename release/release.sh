#!/usr/bin/env bash
# Builds the release artefacts into DIR (default dist/) and checks them
# (docs/install.md, "Release artefacts"):
#   ttlproxy-VERSION-linux-amd64, ttlproxy-VERSION-linux-arm64
#       the binaries: cgo (pg_query_go) against glibc, built on Debian, the
#       arm64 one with Debian's cross compiler (gcc-aarch64-linux-gnu);
#   ttlproxy-VERSION-linux-ARCH.cdx.json
#       a CycloneDX SBOM of the modules each binary records (cyclonedx-gomod);
#   sha256sums
#       for sha256sum -c.
# Checks: each binary's ELF machine, recorded GOARCH and commit, version;
# the amd64 one's `ttlproxy version`; the SBOMs name the parser's module at
# go.mod's version; the sums verify. Nothing is published.
# Usage: release/release.sh [DIR]   (VERSION: default git describe)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
version=${VERSION:-$(git describe --tags --always --dirty)}
# Pinned like golangci-lint in .ci/run; built from source by go install.
CYCLONEDX_GOMOD_VERSION=v1.10.0

if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
  echo "release: installing the arm64 cross compiler (Debian packages gcc-aarch64-linux-gnu, libc6-dev-arm64-cross)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
fi
go install "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@${CYCLONEDX_GOMOD_VERSION}"
cyclonedx_gomod="$(go env GOPATH)/bin/cyclonedx-gomod"

# A release's version needs its CHANGELOG.md section (its format is there).
if [[ $version =~ ^v([0-9]+\.[0-9]+\.[0-9]+)$ ]] &&
  ! grep -qE "^## \[${BASH_REMATCH[1]//./\\.}\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$" CHANGELOG.md; then
  echo "release: CHANGELOG.md has no section \"## [${BASH_REMATCH[1]}] - YYYY-MM-DD\"" >&2
  exit 1
fi

mkdir -p "$out"
rm -f "$out"/ttlproxy-* "$out/sha256sums"
commit=$(git rev-parse HEAD)
parser_version=$(go list -m -f '{{.Version}}' github.com/pganalyze/pg_query_go/v6)
declare -A cc=([amd64]=gcc [arm64]=aarch64-linux-gnu-gcc)
declare -A machine=([amd64]="Advanced Micro Devices X86-64" [arm64]=AArch64)
# Both builds at once: without a warm cache each spends minutes compiling
# libpg_query's C files one after another, on one core each.
t0=$SECONDS
pids=()
for arch in amd64 arm64; do
  # -buildvcs=true: the commit is recorded whatever GOFLAGS says.
  CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=${cc[$arch]} \
    go build -trimpath -buildvcs=true -ldflags "-s -w -X main.version=$version" \
    -o "$out/ttlproxy-$version-linux-$arch" ./cmd/ttlproxy &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid"
done
echo "release: built the amd64 and arm64 binaries in $((SECONDS - t0)) s"
for arch in amd64 arm64; do
  bin="ttlproxy-$version-linux-$arch"
  # From the binary's own record of its modules (what go version -m
  # prints), with Go's standard library; licences detected from the module
  # cache (the main module's is not: it is not fetched from a proxy).
  # GOARCH: cyclonedx-gomod takes the purls' goarch from the environment,
  # not from the binary. GOPROXY=off: the build put every module in the
  # cache, and the main module is not to be looked up.
  if ! GOPROXY=off GOOS=linux GOARCH=$arch "$cyclonedx_gomod" bin -json -licenses -std -noserial -notimestamp -version "$version" \
    -output "$out/$bin.cdx.json" "$out/$bin" 2>"$out/sbom.log"; then
    cat "$out/sbom.log" >&2
    exit 1
  fi
  rm "$out/sbom.log"

  got=$(readelf -h "$out/$bin" | sed -n 's/^ *Machine: *//p')
  if [ "$got" != "${machine[$arch]}" ]; then
    echo "release: $bin is an ELF for $got, not ${machine[$arch]}" >&2
    exit 1
  fi
  # go version -m: the build settings (-ldflags is not recorded with
  # -trimpath: the version string is looked for in the binary).
  info=$(go version -m "$out/$bin")
  for want in "GOARCH=$arch" "CGO_ENABLED=1" "-trimpath=true" "vcs.revision=$commit"; do
    if ! grep -qF -- "$want" <<<"$info"; then
      echo "release: $bin does not record $want (go records no commit in a git worktree: use a clone):" >&2
      echo "$info" >&2
      exit 1
    fi
  done
  if ! grep -qaF -- "$version" "$out/$bin"; then
    echo "release: $bin does not hold its version $version" >&2
    exit 1
  fi
  for want in '"bomFormat": "CycloneDX"' "pkg:golang/github.com/ttlproxy/ttlproxy@$version?" \
    "pkg:golang/github.com/pganalyze/pg_query_go/v6@$parser_version?goarch=$arch"; do
    if ! grep -qF -- "$want" "$out/$bin.cdx.json"; then
      echo "release: $bin.cdx.json lacks $want" >&2
      exit 1
    fi
  done
  glibc=$(readelf --dyn-syms -W "$out/$bin" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
  echo "release: $bin: ${machine[$arch]}, needs $glibc"
done

"$out/ttlproxy-$version-linux-amd64" version | tee "$out/version.txt"
if ! head -n 1 "$out/version.txt" | grep -qxF "ttlproxy $version" || ! grep -q '^commit:  [0-9a-f]\{40\}' "$out/version.txt"; then
  echo "release: the amd64 binary does not report version $version and its commit" >&2
  exit 1
fi
rm "$out/version.txt"
(cd "$out" && sha256sum ttlproxy-* >sha256sums && sha256sum --quiet -c sha256sums)
echo "release: $(cd "$out" && ls | tr '\n' ' ')in $out"
