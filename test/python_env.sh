# Sourced by python.sh and hosts.sh (sh or bash): the environment an
# uninstrumented $PYTHON needs to load this build's module, built with
# FERRY_TEST_CFLAGS.  Sets python_skip to the reason when it cannot load
# it at all, and exports what ASan needs otherwise.
python_skip=
case ${FERRY_TEST_CFLAGS:-} in
*-fsanitize=thread*)
	python_skip="ThreadSanitizer cannot be loaded into an uninstrumented $PYTHON after it started; the plain and ASan builds run this suite" ;;
*-fsanitize=address*)
	# The interpreter is not instrumented: ASan's runtime must come first,
	# and the interpreter's own leaks at exit are not ferry's.  With leaks
	# off, the slow unwinder the C tests ask for on every malloc
	# (fast_unwind_on_malloc=0, for leak stacks through libfabric) buys
	# nothing but the allocation stack of a report, and costs 2.6 times
	# the suite's time (mostly importing torch): the frame-pointer unwinder
	# still names ferry's frames, built with -fno-omit-frame-pointer.
	LD_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so)
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:fast_unwind_on_malloc=1"
	export LD_PRELOAD ASAN_OPTIONS ;;
esac
