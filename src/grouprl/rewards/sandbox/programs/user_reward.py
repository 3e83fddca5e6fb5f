"""A user's reward file, run in the sandbox for one batch (see ``sandbox/user_reward.py``).

stdin: a JSON line ``{"lib", "source", "filename", "name", "mark", "sample_timeout", "check_only"}``,
then a JSON line with the samples. The file is executed (an exception or ``sys.exit`` at import
is reported as ``load_error``, never as scores), then the function is called once per sample,
each call with its own ``sample_timeout`` (a timer signal: this is the process's main thread). The
results follow ``mark``, which holds a per-run secret, so a completion the reward prints cannot
pass for them.
"""

import json
import signal
import sys
import types


class SampleTimeout(BaseException):
    """Raised in the reward by the per-sample timer (a BaseException: ``except Exception`` keeps it)."""


def _on_timer(signum, frame):
    raise SampleTimeout()


def _call(fn, sample):
    if hasattr(fn, "reward_mode"):
        result = fn(sample["messages"], ground_truth=sample["ground_truth"], **sample["kwargs"])
        return {"result": result.model_dump()}
    completion = sample["messages"][-1]["content"]
    return {"result": {"score": fn(completion, sample["ground_truth"], **sample["kwargs"])}}


def main():
    params = json.loads(sys.stdin.readline())
    samples = json.loads(sys.stdin.readline())
    mark = params["mark"]
    sys.path.insert(0, params["lib"])  # the grouprl package, read-only (records, reward kit)
    module = types.ModuleType("user_reward")
    try:
        exec(compile(params["source"], params["filename"], "exec"), module.__dict__)
        fn = getattr(module, params["name"], None)
        if not callable(fn):
            raise LookupError(f"the file defines no function '{params['name']}'")
    except BaseException as err:  # noqa: BLE001 - sys.exit at import too: an error, never an empty success
        line = next(
            (tb.tb_lineno for tb in _frames(err.__traceback__) if tb.tb_frame.f_code.co_filename == params["filename"]),
            None,
        )
        where = f" (line {line})" if line else ""
        if isinstance(err, SystemExit):
            text = f"called sys.exit({err.code!r}) at import{where}; a reward file must define its function, not exit"
        else:
            text = f"{type(err).__name__}{where}: {str(err)[:300]}"
        print("\n" + mark + json.dumps({"load_error": text}))
        return
    if params["check_only"]:  # a @learned_reward factory is refused by the trainer: it cannot live here
        learned = getattr(fn, "makes_learned_reward", False) is True
        print("\n" + mark + json.dumps({"ok": True, "learned_reward": learned}))
        return
    signal.signal(signal.SIGALRM, _on_timer)
    budget = float(params["sample_timeout"])
    out = []
    for sample in samples:
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            try:
                row = _call(fn, sample)
            finally:  # stopped before any handler below runs, so it cannot fire inside one
                signal.setitimer(signal.ITIMER_REAL, 0)
        except SampleTimeout:
            row = {"error": f"RewardTimeout: no result within reward_timeout={budget:g}s for this sample"}
        except BaseException as err:  # noqa: BLE001 - sys.exit in a sample is that sample's error
            row = {"error": type(err).__name__ + ": " + str(err)}
        out.append(row)
    print("\n" + mark + json.dumps(out))


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


if __name__ == "__main__":
    main()
