#!/usr/bin/env bash
# Build parcagpu's CUPTI injection library (libparcagpucupti.so) offline.
#
#   bash bench/gpu/parcagpu_build.sh SRC_DIR SDT_DIR OUT_DIR
#
# SRC_DIR  parcagpu source tree with its `proton` submodule checked out at
#          SRC_DIR/proton (CMakeLists.txt at SRC_DIR/CMakeLists.txt).
# SDT_DIR  systemtap SDT bits: SDT_DIR/include/sys/{sdt.h,sdt-config.h} and
#          SDT_DIR/bin/dtrace (systemtap's python dtrace script). If
#          SDT_DIR/bin/dtrace is absent, `dtrace` from PATH is used.
# OUT_DIR  receives libparcagpucupti.so (build tree in OUT_DIR/.build-parcagpu).
#
# Environment (all optional):
#   CUDA_HOME   CUDA toolkit root with include/cupti.h   (default /usr/local/cuda)
#   BUILD_TYPE  CMake build type                          (default Release)
#   JOBS        parallel build jobs                       (default 2)
#   NICE        nice level for the build                  (default 10)
#   MAX_GLIBC   fail if the .so needs a newer GLIBC_x.y   (default 2.39)
#
# No network access is used. libcupti is NOT linked: proton dlopen()s
# "libcupti.so" at runtime (or $TRITON_CUPTI_LIB_PATH/libcupti.so).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 SRC_DIR SDT_DIR OUT_DIR" >&2
  exit 2
fi

abspath() { (cd "$1" && pwd -P); }
SRC_DIR=$(abspath "$1")
SDT_DIR=$(abspath "$2")
mkdir -p "$3"
OUT_DIR=$(abspath "$3")

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-2}
NICE=${NICE:-10}
MAX_GLIBC=${MAX_GLIBC:-2.39}
BUILD_DIR="$OUT_DIR/.build-parcagpu"
LIB="$OUT_DIR/libparcagpucupti.so"

die() { echo "parcagpu_build: $*" >&2; exit 1; }

[ -f "$SRC_DIR/CMakeLists.txt" ] || die "no CMakeLists.txt in $SRC_DIR"
[ -f "$SRC_DIR/src/probes.d" ] || die "no src/probes.d in $SRC_DIR"
[ -f "$SRC_DIR/proton/csrc/lib/Driver/GPU/CuptiApi.cpp" ] ||
  die "proton submodule missing under $SRC_DIR/proton"
[ -f "$SDT_DIR/include/sys/sdt.h" ] || die "no include/sys/sdt.h in $SDT_DIR"
[ -f "$CUDA_HOME/include/cupti.h" ] || die "no $CUDA_HOME/include/cupti.h"

if [ -x "$SDT_DIR/bin/dtrace" ]; then
  DTRACE="$SDT_DIR/bin/dtrace"
else
  DTRACE=$(command -v dtrace) || die "no dtrace in $SDT_DIR/bin or PATH"
fi
command -v python3 >/dev/null || die "python3 needed by systemtap dtrace"

# dtrace -G compiles a stub with $CC/$CFLAGS; make it see our sdt.h first.
export CFLAGS="-I$SDT_DIR/include ${CFLAGS:-}"
export CXXFLAGS="-I$SDT_DIR/include ${CXXFLAGS:-}"
export PATH="$(dirname "$DTRACE"):$PATH"

rm -rf "$BUILD_DIR"
echo "== configure ($BUILD_TYPE, CUDA_HOME=$CUDA_HOME, dtrace=$DTRACE)"
nice -n "$NICE" cmake -S "$SRC_DIR" -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DBUILD_TESTS=OFF \
  -DCUDAToolkit_ROOT="$CUDA_HOME" \
  -DCUDA_INCLUDE_DIR="$CUDA_HOME/include" \
  -DDTRACE="$DTRACE"
echo "== build (-j$JOBS)"
nice -n "$NICE" cmake --build "$BUILD_DIR" -j "$JOBS"

cp -f "$BUILD_DIR/lib/libparcagpucupti.so" "$LIB"

echo "== checks"
ls -l "$LIB"
sha256sum "$LIB"

probes=$(readelf -n "$LIB" | awk '/Provider:/{p=$2} /Name:/{if (p=="parcagpu") print $2}' | sort -u)
echo "stapsdt probes (provider parcagpu): $(echo $probes)"
for p in cuda_correlation kernel_executed activity_batch; do
  echo "$probes" | grep -qx "$p" || die "missing USDT probe parcagpu:$p"
done

needed=$(readelf -d "$LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "NEEDED: $(echo $needed)"
for n in $needed; do
  case "$n" in
    libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|ld-linux-*.so.*|\
    libstdc++.so.6|libgcc_s.so.1|libcupti.so.*) ;;
    *) die "unexpected NEEDED library: $n" ;;
  esac
done

max_glibc=$(objdump -T "$LIB" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
max_glibcxx=$(objdump -T "$LIB" | grep -o 'GLIBCXX_[0-9][0-9.]*' | sort -uV | tail -1)
echo "max GLIBC symbol version: GLIBC_$max_glibc; max GLIBCXX: ${max_glibcxx:-none}"
if [ "$(printf '%s\n%s\n' "$max_glibc" "$MAX_GLIBC" | sort -V | tail -1)" != "$MAX_GLIBC" ]; then
  die "needs GLIBC_$max_glibc > allowed $MAX_GLIBC"
fi
nm -D --defined-only "$LIB" | grep -qw InitializeInjection ||
  die "InitializeInjection not exported"
echo "OK: $LIB"
