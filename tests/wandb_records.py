"""Reading an offline W&B run file back, for the --report-to tests (train, eval, sweep)."""

from __future__ import annotations


def wandb_records(path):
    """The protobuf records of an offline W&B run file (a LevelDB-style log: 32 KiB blocks of chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, position, chunk = path.read_bytes(), 7, b""  # 7: the ":W&B" header and version
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # records never start in a block's last 6 bytes
            position += 32768 - position % 32768
            continue
        length, kind = int.from_bytes(data[position + 4 : position + 6], "little"), data[position + 6]
        if position + 7 + length > len(data):  # still being written
            return
        chunk, position = chunk + data[position + 7 : position + 7 + length], position + 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(chunk)
            chunk = b""
            yield record
