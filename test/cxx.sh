# Sourced by the tests that compile C++ (headers.sh, symbols.sh): sets cxx
# to the first C++ compiler found ($CXX, c++, g++, clang++), or to nothing.
cxx=
for c in "${CXX:-}" c++ g++ clang++; do
	if test -n "$c" && command -v "$c" >/dev/null 2>&1; then
		cxx=$c
		break
	fi
done
