#!/bin/sh
# The uninstalled pkg-config file lets a program include <dcp/dcp.h> and link libdcp
# straight from the build tree (before `meson install`).
# usage: check_uninstalled_pc.sh BUILD_ROOT CC [CC_ARGS...]
set -eu
build=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/use_dcp.c" <<'SRC'
#include <stdio.h>
#include <dcp/dcp.h>
int main(void)
{
    printf("libdcp %s: %s\n", dcp_version(), dcp_strerror(DCP_EINVAL));
    return 0;
}
SRC
export PKG_CONFIG_PATH="$build/meson-uninstalled"
flags=$(pkg-config --cflags --libs dcp-uninstalled)
echo "pkg-config dcp-uninstalled: $flags"
# shellcheck disable=SC2086
"$@" -o "$dir/use_dcp" "$dir/use_dcp.c" $flags
LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$dir/use_dcp"
