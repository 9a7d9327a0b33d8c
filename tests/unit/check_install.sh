#!/bin/sh
# What an embedder and an operator get from `meson install`: the build is installed to a
# temporary directory (--destdir), and there
#   - the first program of docs/embedding.md ("Build your first program", extracted from
#     the page) builds out of tree with plain pkg-config and runs, as C and as C++;
#   - the installed dcp-run runs without LD_LIBRARY_PATH (its run path is relative) and
#     takes the configs installed beside it, not the source tree's.
# usage: check_install.sh BUILD_ROOT SOURCE_ROOT PREFIX LIBDIR BINDIR DATADIR
# CC and CXX (command lines, CXX may be empty) come from the environment.
set -eu
build=$1 src=$2 prefix=$3 libdir=$4 bindir=$5 datadir=$6
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

meson install -C "$build" --no-rebuild --quiet --destdir "$dir/root" >"$dir/install.log" 2>&1 ||
    fail "meson install: $(cat "$dir/install.log")"
root=$dir/root$prefix
case $libdir in /*) lib=$dir/root$libdir ;; *) lib=$root/$libdir ;; esac
case $bindir in /*) bin=$dir/root$bindir ;; *) bin=$root/$bindir ;; esac
case $datadir in /*) data=$dir/root$datadir ;; *) data=$root/$datadir ;; esac
[ -f "$lib/pkgconfig/dcp.pc" ] || fail "no dcp.pc in $lib/pkgconfig"
[ -f "$data/dcp/configs/default.yaml" ] || fail "the configs are not installed in $data/dcp/configs"

# The program of the page, between the marker and the end of its code block.
sed -n '/^<!-- first-program -->$/,/^```$/p' "$src/docs/embedding.md" | sed '1,2d;$d' >"$dir/first.c"
grep -q 'dcp_engine_create' "$dir/first.c" || fail "no first program in docs/embedding.md"
cp "$dir/first.c" "$dir/first.cpp"

# Plain pkg-config, told where the prefix is (the sysroot maps the prefix into the destdir).
export PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$dir/root"
flags=$(pkg-config --cflags --libs dcp) || fail "pkg-config dcp"
echo "pkg-config dcp: $flags"
# shellcheck disable=SC2086
$CC -std=c17 -Wall -Wextra -Werror -o "$dir/first" "$dir/first.c" $flags || fail "cc first.c"
LD_LIBRARY_PATH=$lib "$dir/first" "$data/dcp/configs/default.yaml" || fail "first (C) did not run"
if [ -n "${CXX:-}" ]; then
    # shellcheck disable=SC2086
    $CXX -Wall -Wextra -Wshadow -Werror -o "$dir/first_cxx" "$dir/first.cpp" $flags || fail "c++ first.cpp"
    LD_LIBRARY_PATH=$lib "$dir/first_cxx" "$data/dcp/configs/default.yaml" || fail "first (C++) did not run"
else
    echo "no C++ compiler: the C++ build of the first program is skipped"
fi

# The installed tool: no LD_LIBRARY_PATH, and its default deployment is the installed one.
unset LD_LIBRARY_PATH
env -u DCP_DEFAULT_DEPLOYMENT "$bin/dcp-run" plan --help >"$dir/help" 2>&1 || fail "installed dcp-run: $(cat "$dir/help")"
grep -q "$data/dcp/configs/default.yaml" "$dir/help" ||
    fail "installed dcp-run does not default to the installed configs: $(grep -A1 defaults "$dir/help")"
env -u DCP_DEFAULT_DEPLOYMENT "$bin/dcp-run" plan >"$dir/plan" 2>&1 || fail "installed dcp-run plan: $(cat "$dir/plan")"
echo "ok: installed to $dir/root$prefix, first program built as C${CXX:+ and C++}, installed dcp-run runs"
