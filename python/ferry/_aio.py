"""`await request` and `await ctx.notifications()`: no thread per request
and no sleep-polling where the context has a progress thread.  The thread writes the context's event
descriptor (Context.fd(), ferry_context_fd) when, armed, a request ended
or a notification arrived; the event loop watches that descriptor
(loop.add_reader), and when it is readable tests the requests awaited
on the context and takes notifications for those who await them, then
arms it again (Context.arm(): False when something came since the last
arm, so it looks once more first).

Without a progress thread nothing would write the descriptor: each test
drives the context once, and the loop sleeps between tests, a little
longer each time up to a bound."""
import asyncio
import weakref

_FIRST_PAUSE_S = 20e-6
_LONGEST_PAUSE_S = 1e-3

# What the reactors did, for tests: descriptor wake-ups and request tests.
stats = {"wakeups": 0, "tests": 0}


class _Reactor:
    """The requests awaited on one context in one event loop."""

    def __init__(self, ctx, loop):
        # Weakly: the tables below key on both, and a strong reference
        # from here would keep them alive for ever.
        self._ctx = weakref.ref(ctx)
        self._loop = weakref.ref(loop)
        self.fd = ctx.fd()
        self.waiting = {}  # request -> future
        self.notify_waiting = []  # [future, most], first come first served
        # A closed context's descriptor number may be this one's now:
        # forget what the loop still has under it.
        loop.remove_reader(self.fd)
        loop.add_reader(self.fd, self._readable)

    def add(self, request):
        fut = self._loop().create_future()
        self.waiting[request] = fut
        # It may have ended before the descriptor was armed for it.
        self._look()
        return fut

    def add_notify_waiter(self, most):
        fut = self._loop().create_future()
        self.notify_waiting.append((fut, most))
        self._look()
        return fut

    def _hand_out_notifications(self, ctx):
        """Each waiter, in turn, gets what is queued (up to its most)."""
        while self.notify_waiting:
            fut, most = self.notify_waiting[0]
            if fut.done():  # cancelled by the awaiting task
                self.notify_waiting.pop(0)
                continue
            stats["tests"] += 1
            try:
                got = ctx.notify_poll(most)
            except Exception as exc:
                self.notify_waiting.pop(0)
                fut.set_exception(exc)
                continue
            if not got:
                return
            self.notify_waiting.pop(0)
            fut.set_result(got)

    def _readable(self):
        stats["wakeups"] += 1
        self._look()

    def _look(self):
        while True:
            for request, fut in list(self.waiting.items()):
                if fut.done():  # cancelled by the awaiting task
                    del self.waiting[request]
                    continue
                stats["tests"] += 1
                try:
                    done = request.test()
                except Exception as exc:  # the request's own error
                    fut.set_exception(exc)
                    done = True
                else:
                    if done:
                        fut.set_result(None)
                if done:
                    del self.waiting[request]
            ctx = self._ctx()
            if ctx is None or ctx.closed:
                self.close()
                return
            self._hand_out_notifications(ctx)
            if ctx.arm():
                return

    def close(self):
        loop = self._loop()
        if self.fd is not None and loop is not None and not loop.is_closed():
            loop.remove_reader(self.fd)
        self.fd = None


# One reactor per (context, loop); both may go first.
_reactors = weakref.WeakKeyDictionary()


def _reactor(ctx, loop):
    per_loop = _reactors.setdefault(ctx, weakref.WeakKeyDictionary())
    r = per_loop.get(loop)
    if r is None or r.fd is None:
        r = per_loop[loop] = _Reactor(ctx, loop)
    return r


async def _sleep_polling(look):
    """look() until it gives something true, and that: each look drives
    the context; the loop sleeps between looks, a little longer each
    time up to a bound."""
    pause = 0.0
    while not (got := look()):
        await asyncio.sleep(pause)
        pause = min(max(pause * 2, _FIRST_PAUSE_S), _LONGEST_PAUSE_S)
    return got


async def notifications(ctx, most):
    got = ctx.notify_poll(most)
    if got:
        return got
    try:
        reactor = _reactor(ctx, asyncio.get_running_loop())
    except ValueError:  # no progress thread: nothing writes a descriptor
        return await _sleep_polling(lambda: ctx.notify_poll(most))
    return await reactor.add_notify_waiter(most)


async def wait(request, ctx):
    if request.test():
        return
    try:
        reactor = _reactor(ctx, asyncio.get_running_loop())
    except ValueError:  # no progress thread: nothing writes a descriptor
        await _sleep_polling(request.test)
        return
    await reactor.add(request)
