"""Memos keyed on the Parallelism fields a function reads, not on the whole layout: points of a
sweep that differ only in knobs the function ignores (the overlap flags, the ZeRO stage, the
allocator) share one result instead of each costing it again."""
from functools import wraps
from operator import attrgetter

MEMO_SIZE = 16384  # results kept per function; the memo starts over when full


def on_fields(*names: str, at: int = 2, size: int = MEMO_SIZE):
    """Memoize a function on its arguments, the Parallelism at position `at` standing in by its
    `names` fields alone. The function must read no other field of it (tests/test_memo.py
    checks each memoized function against a fresh call on layouts that differ in the rest)."""
    read = attrgetter(*names)

    def wrap(function):
        cache = {}

        @wraps(function)
        def memoized(*args):
            key = args[:at] + (read(args[at]),) + args[at + 1:]
            try:
                return cache[key]
            except KeyError:
                pass
            if len(cache) >= size:
                cache.clear()
            result = cache[key] = function(*args)
            return result

        memoized.cache_clear = cache.clear
        memoized.fields = names
        memoized.uncached = function
        return memoized

    return wrap
