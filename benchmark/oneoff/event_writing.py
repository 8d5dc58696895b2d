"""What writing TensorBoard events costs the driver, three ways, in CPU seconds.

Between chunks the driver logs every iteration of every seed: the README's PPO run with
8 seeds logs 8 x 976 points of about 10 tags, on a machine whose cores are all training. This
writes that many points to fresh event files, each way to close(), and reports the process's
CPU time (every thread's), best of the rounds:

- `appended per chunk`: what the harness's RunLogger does: one event per point holding all its tags,
  tensorboardX's records written in the calling thread to the event file, opened for each chunk's
  points (tenths of the run here) and closed, so that no file stays open per run;
- `EventsWriter`: tensorboardX's event file written in the calling thread, one event per point, the
  file held open (what RunLogger did before);
- `SummaryWriter`, one event per point: the same events through tensorboardX's public writer,
  which hands each to a writer thread through a multiprocessing queue (pickled, then
  serialised again);
- `add_scalar`: SummaryWriter's one event per tag.

    python -m benchmark.oneoff.event_writing --seeds 8 --points 976 --tags 10
"""

from __future__ import annotations

import argparse
import resource
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tensorboardX import SummaryWriter
from tensorboardX.event_file_writer import EventsWriter
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.record_writer import masked_crc32c

Points = list[tuple[int, dict[str, float]]]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # all the process's threads
    return usage.ru_utime + usage.ru_stime


def summary(values: dict[str, float]) -> Summary:
    return Summary(value=[Summary.Value(tag=tag, simple_value=x) for tag, x in values.items()])


def appended_per_chunk(folder: Path, points: Points) -> None:  # RunLogger.append_events, chunk by chunk
    path, per_chunk = folder / "events.out.tfevents.0.host", max(1, len(points) // 10)
    for first in range(0, len(points), per_chunk):
        with open(path, "ab") as file:
            for step, values in points[first : first + per_chunk]:
                data = Event(wall_time=time.time(), step=step, summary=summary(values)).SerializeToString()
                header = struct.pack("<Q", len(data))
                file.write(header + struct.pack("<I", masked_crc32c(header)) + data)
                file.write(struct.pack("<I", masked_crc32c(data)))


def events_writer(folder: Path, points: Points) -> None:
    events = EventsWriter(f"{folder}/events")
    for step, values in points:
        events.write_event(Event(wall_time=time.time(), step=step, summary=summary(values)))
    events.close()


def summary_writer(folder: Path, points: Points) -> None:
    writer = SummaryWriter(str(folder))
    for step, values in points:
        writer.file_writer.add_summary(summary(values), step)
    writer.close()


def add_scalar(folder: Path, points: Points) -> None:
    writer = SummaryWriter(str(folder))
    for step, values in points:
        for tag, value in values.items():
            writer.add_scalar(tag, value, step)
    writer.close()


WAYS: dict[str, Callable[[Path, Points], None]] = {
    "appended per chunk": appended_per_chunk,
    "EventsWriter": events_writer,
    "SummaryWriter, one event per point": summary_writer,
    "add_scalar": add_scalar,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="run directories (one writer each)")
    parser.add_argument("--points", type=int, default=976, help="logged points per run directory")
    parser.add_argument("--tags", type=int, default=10, help="scalars per point")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best is reported")
    args = parser.parse_args()
    values = lambda i: {f"losses/tag_{t}": 0.5 + i * t for t in range(args.tags)}
    points = [(512 * (i + 1), values(i)) for i in range(args.points)]
    best = dict.fromkeys(WAYS, float("inf"))
    for _ in range(args.rounds):
        for name, write in WAYS.items():
            with tempfile.TemporaryDirectory() as root:
                start = cpu_seconds()
                for seed in range(args.seeds):
                    (folder := Path(root) / str(seed)).mkdir()
                    write(folder, points)
                best[name] = min(best[name], cpu_seconds() - start)
    print(f"{args.seeds} x {args.points} points of {args.tags} tags, CPU seconds, best of {args.rounds}:")
    for name, seconds in best.items():
        print(f"  {name:<36} {seconds:6.3f} s  ({seconds / best['EventsWriter']:.1f}x)")


if __name__ == "__main__":
    main()
