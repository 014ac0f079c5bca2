"""`await request`: the request is tested from the event loop, which
sleeps between tests, a little longer each time up to a bound: no thread
per request, and no busy loop.  A progress thread (Context(...,
progress_thread=True)) moves the data meanwhile; without one, each test
drives the context once."""
import asyncio

_FIRST_PAUSE_S = 20e-6
_LONGEST_PAUSE_S = 1e-3


async def wait(request):
    pause = 0.0
    while not request.test():
        await asyncio.sleep(pause)
        pause = min(max(pause * 2, _FIRST_PAUSE_S), _LONGEST_PAUSE_S)
