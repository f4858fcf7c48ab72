"""A stop signal that reached one rank only: at the step boundary every rank agrees to stop on it.

`torchrun --nproc_per_node 2 stop_flag.py OUT`: rank 1 sends itself a real SIGTERM inside the training
loop's signal block; both ranks then ask `StopRequest.agreed` (an all-reduce), and rank 0 saves what each
rank received and what each agreed on.
"""

import os
import signal
import sys

import torch

from core.engine.distributed import all_gather_object, init_distributed
from core.trainer.signals import deferred_stop


def main(out_path: str) -> None:
    world = init_distributed("cpu")
    with deferred_stop(lambda: "") as request:
        if world.rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        received = request.signum
        agreed = request.agreed(world)
    result = {"received": all_gather_object(received), "agreed": all_gather_object(agreed)}
    if world.is_main:
        torch.save(result, out_path)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
