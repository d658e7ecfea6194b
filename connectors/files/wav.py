"""WAV recordings (vibration, acoustics) as 2-D sample blocks: frames x channels, with a time per frame.

The RIFF chunks are parsed here with numpy (stdlib ``wave`` reads PCM
integers only): PCM 8, 16, 24 and 32-bit integers and IEEE float 32 and
64-bit, plain or WAVE_FORMAT_EXTENSIBLE. Samples keep their values and
type: 16-bit as int16, 24 and 32-bit as int32 (24-bit sign-extended, not
scaled), float32 and float64 as they are; 8-bit (unsigned in WAV) as int16
minus 128, its signed value.

The time of frame ``i`` is ``start + round(i * 1e9 / rate)`` ns, ``start``
being, in this order: ``options.start`` (``--start``; ``windvane import``
gives the next WAV file of its command line the :attr:`WavReader.end_ns`
of the one before, so that they follow each other); the origination
date and time of a BWF ``bext`` chunk (no zone in BWF: taken as UTC); the
file's modification time minus the recording's duration (a recorder
writes the file as it records, so it was last modified at the end).

Frames are read ``options.block_bytes`` at a time (bounded memory); the
position is a frame index.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from windvane.ingest.times import time_ns

from . import FileFormatError, Part, ReaderOptions

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


@dataclass(frozen=True)
class WavInfo:
    """What a WAV file's chunks say."""

    channels: int
    rate: int
    bits: int
    floating: bool
    data_offset: int  # where the frames start
    frames: int
    origination: int | None  # ns since the epoch, from a bext chunk

    @property
    def frame_bytes(self) -> int:
        """Bytes of one frame: a sample of every channel."""
        return self.channels * self.bits // 8

    @property
    def dtype(self) -> np.dtype:
        """The dtype samples are stored as."""
        if self.floating:
            return np.dtype("float32" if self.bits == 32 else "float64")
        return np.dtype({8: "int16", 16: "int16", 24: "int32", 32: "int32"}[self.bits])


def _bext_time(chunk: bytes) -> int | None:
    """The origination date and time of a BWF ``bext`` chunk, as ns since the epoch (UTC), if it has one."""
    text = chunk[320:338].decode("ascii", "replace")
    try:
        date = dt.date.fromisoformat(text[:10].replace(":", "-").replace("/", "-"))
        hh, mm, ss = (int(x) for x in text[10:18].replace("-", ":").replace(".", ":").split(":"))
    except ValueError:
        return None
    return time_ns(dt.datetime(date.year, date.month, date.day, hh, mm, ss, tzinfo=dt.UTC))


def read_info(path: str | Path) -> WavInfo:
    """Parse the RIFF header of ``path``; FileFormatError naming what is wrong."""
    fmt = None
    origination = None
    with open(path, "rb") as f:
        riff = f.read(12)
        if len(riff) < 12 or riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
            raise FileFormatError(f"{path}: not a WAV file (no RIFF/WAVE header)")
        while True:
            head = f.read(8)
            if len(head) < 8:
                raise FileFormatError(f"{path}: no 'data' chunk")
            cid, size = head[:4], struct.unpack("<I", head[4:])[0]
            if cid == b"data":
                if fmt is None:
                    raise FileFormatError(f"{path}: the 'data' chunk comes before 'fmt '")
                offset = f.tell()
                available = os.path.getsize(path) - offset
                size = available if size in (0, 0xFFFFFFFF) else min(size, available)  # streaming writers
                tag, channels, rate, bits, floating = fmt
                frames = size // (channels * bits // 8)
                return WavInfo(channels, rate, bits, floating, offset, frames, origination)
            body = f.read(size + (size & 1))  # chunks are padded to even sizes
            if cid == b"fmt ":
                if size < 16:
                    raise FileFormatError(f"{path}: 'fmt ' chunk of {size} bytes is too short")
                tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
                if tag == _EXTENSIBLE and size >= 40:
                    tag = struct.unpack("<H", body[24:26])[0]  # the subformat GUID starts with the format tag
                floating = tag == _FLOAT
                if (
                    tag not in (_PCM, _FLOAT)
                    or (floating and bits not in (32, 64))
                    or (not floating and bits not in (8, 16, 24, 32))
                ):
                    raise FileFormatError(
                        f"{path}: format tag {tag} with {bits} bits is not supported "
                        "(PCM 8/16/24/32-bit integers, IEEE float 32/64-bit)"
                    )
                if channels < 1 or rate < 1:
                    raise FileFormatError(f"{path}: {channels} channels at {rate} Hz")
                fmt = (tag, channels, rate, bits, floating)
            elif cid == b"bext":
                origination = _bext_time(body)


def decode_frames(raw: bytes, info: WavInfo) -> np.ndarray:
    """Whole frames of ``raw`` as a frames x channels array of ``info.dtype``."""
    if info.bits == 24:
        data = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        samples = (data[:, 0] | (data[:, 1] << 8) | (data[:, 2] << 16)) << 8 >> 8  # sign-extend
    elif info.bits == 8:
        samples = np.frombuffer(raw, dtype=np.uint8).astype(np.int16) - 128
    else:
        samples = np.frombuffer(raw, dtype=info.dtype.newbyteorder("<")).astype(info.dtype)
    return samples.reshape(-1, info.channels)


def frame_times(start_ns: int, first: int, count: int, rate: int) -> np.ndarray:
    """The ns times of frames ``first .. first + count``: ``start + round(i * 1e9 / rate)``, in integers."""
    index = np.arange(first, first + count, dtype=np.int64)
    seconds, rest = np.divmod(index, rate)
    times: np.ndarray = start_ns + seconds * 10**9 + (rest * 10**9 + rate // 2) // rate
    return times


class WavReader:
    """``reader(start)`` yields :class:`Part` objects of a WAV file from frame ``start``."""

    def __init__(self, path: str | Path, options: ReaderOptions):
        self.path = str(path)
        self.info = read_info(self.path)
        self.block_frames = max(1, options.block_bytes // self.info.frame_bytes)
        info = self.info
        if options.start is not None:
            self.start_ns = int(options.start)
        elif info.origination is not None:
            self.start_ns = info.origination
        else:
            end = os.stat(self.path).st_mtime_ns
            self.start_ns = end - (info.frames * 10**9 + info.rate // 2) // info.rate

    @property
    def end_ns(self) -> int:
        """The time just after the last frame: where a recording that follows this one starts."""
        return int(frame_times(self.start_ns, self.info.frames, 1, self.info.rate)[0])

    def __call__(self, start: int | None) -> Iterator[Part]:
        info = self.info
        frame = int(start or 0)
        with open(self.path, "rb") as f:
            f.seek(info.data_offset + frame * info.frame_bytes)
            while frame < info.frames:
                count = min(self.block_frames, info.frames - frame)
                raw = f.read(count * info.frame_bytes)
                count = len(raw) // info.frame_bytes
                if not count:
                    return
                samples = decode_frames(raw[: count * info.frame_bytes], info)
                times = frame_times(self.start_ns, frame, count, info.rate)
                frame += count
                nbytes = count * info.frame_bytes + (info.data_offset if frame == count else 0)
                yield Part(
                    pa.table({"time": pa.array(times, pa.int64())}),
                    frame,
                    nbytes,
                    samples=samples,
                    sample_rate=float(info.rate),
                )


def wav_reader(path: str | Path, options: ReaderOptions) -> WavReader:
    """The reader of WAV file ``path`` (its header is parsed now: FileFormatError if it is not a WAV we read)."""
    return WavReader(path, options)
