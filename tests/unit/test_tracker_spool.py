"""The tracker's spool without a broker: the frame format and its torn tails (core.spool), the folder and its
sender with a scripted producer (serving.spool), and the tracker's 503 when the spool is full."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from core.errors import CorruptRecord
from core.spool import (SpoolFull, SpoolLedger, SpoolRecord, decode_acks, decode_frame, encode_acks, encode_record,
                        scan_segment, segment_first_sequence, segment_name)
from core.tokens import TokenClaims, TokenKeys
from schemas import topics
from serving.spool import Spool, SpoolLocked, SpoolSender, SpoolSettings, default_spool_dir
from serving.tracker import Tracker

REPO = Path(__file__).resolve().parents[2]
SMALL = 64 * 1024  # the smallest bound: segments of 64 KiB too


class Broker:
    """A scripted producer: records what it was given; `poll` acknowledges (up) or fails (down) each delivery."""

    class Error:
        def __init__(self, text: str, fatal: bool = False):
            self.text, self._fatal = text, fatal

        def fatal(self) -> bool:
            return self._fatal

        def __str__(self) -> str:
            return self.text

    def __init__(self, up: bool = True):
        self.up, self.sent, self.waiting, self.purged = up, [], [], False
        self.silent = False  # holds its delivery reports (the test calls them)
        self.on_error = None

    def __call__(self, on_error):  # the sender's make_producer
        self.on_error = on_error
        return self

    def produce(self, topic, key, value, timestamp, on_delivery):
        self.sent.append((topic, key, value, timestamp))
        self.waiting.append(on_delivery)

    def poll(self, timeout=0):
        if self.silent:
            return 0
        waiting, self.waiting = self.waiting, []
        for callback in waiting:
            callback(None if self.up else self.Error("Local: Message timed out"), None)
        return len(waiting)

    def purge(self):
        self.purged = True


def _spool(folder: Path, max_bytes: int = 1024 * 1024) -> Spool:
    return Spool(SpoolSettings(folder, max_bytes=max_bytes, fsync_interval_ms=200), clock=lambda: 1_800_000_000.0)


def _values(broker: Broker) -> list[bytes]:
    return [value for _, _, value, _ in broker.sent]


def _drain(sender: SpoolSender, rounds: int = 3) -> None:
    for _ in range(rounds):
        sender.pump()


# core.spool: frames, segments, acks, the ledger ---------------------------------------------------------------------
def test_a_frame_decodes_to_the_record_it_was_written_from():
    record = SpoolRecord(7, 1_800_000_000_123, topics.AD_EVENTS, b"42", b"\x00avro bytes")
    assert decode_frame(encode_record(record)) == record


def test_a_segment_scan_stops_at_a_frame_whose_checksum_fails_and_keeps_the_frames_before_it():
    frames = [encode_record(SpoolRecord(s, 1, topics.AD_EVENTS, b"k", b"v%d" % s)) for s in range(3)]
    last = bytearray(frames[2])
    last[-1] ^= 0xFF
    scan = scan_segment(frames[0] + frames[1] + bytes(last))
    assert [r.record.sequence for r in scan.records] == [0, 1]
    assert scan.valid_bytes == len(frames[0]) + len(frames[1]) and scan.torn_bytes == len(last)


def test_zeros_after_the_last_frame_read_as_a_torn_tail():
    frame = encode_record(SpoolRecord(0, 1, topics.AD_EVENTS, b"k", b"v"))
    scan = scan_segment(frame + bytes(100))
    assert len(scan.records) == 1 and scan.torn_bytes == 100


def test_a_frame_cut_anywhere_is_never_read_as_a_record():
    frame = encode_record(SpoolRecord(3, 1, topics.AD_FEEDBACK, b"imp-1", b"value"))
    for cut in range(len(frame)):
        assert scan_segment(frame[:cut]).records == ()
    with pytest.raises(CorruptRecord):
        decode_frame(frame[:-1])


def test_a_torn_last_acknowledgement_is_ignored():
    data = encode_acks([1, 5, 9])
    assert decode_acks(data + data[:5]) == {1, 5, 9}


def test_segment_names_carry_their_first_sequence_and_other_files_are_not_segments():
    assert segment_first_sequence(segment_name(1234)) == 1234
    assert segment_first_sequence("spool.lock") is None
    assert segment_first_sequence("00000000000000001234.acks") is None


def test_the_ledger_sends_lowest_sequence_first_and_a_failed_record_goes_back_in_order():
    ledger = SpoolLedger(max_bytes=10_000, segment_bytes=1_000)
    ledger.opened_segment()
    for _ in range(4):
        ledger.appended(100)
    assert ledger.take(2) == [0, 1]
    assert ledger.failed(1) and not ledger.failed(3)  # 3 was never in flight
    assert ledger.take(10) == [1, 2, 3]


def test_an_acknowledgement_twice_changes_nothing():
    ledger = SpoolLedger(max_bytes=10_000, segment_bytes=1_000)
    first = ledger.opened_segment()
    ledger.appended(100)
    ledger.take(1)
    assert ledger.acknowledged(0) == first
    assert ledger.acknowledged(0) is None and ledger.pending_count == 0


# serving.spool: the folder and its sender ---------------------------------------------------------------------------
def test_a_record_is_done_only_when_the_broker_acknowledges_it(tmp_path):
    spool, broker = _spool(tmp_path), Broker(up=False)
    sender = SpoolSender(spool, broker)
    spool.append(topics.AD_EVENTS, b"7", b"click-1")
    sender.pump()
    assert _values(broker) == [b"click-1"] and spool.pending == 1  # sent, not acknowledged: still kept
    broker.up = True
    sender._resume_at = 0.0
    _drain(sender)
    assert spool.pending == 0


def test_a_refused_delivery_is_sent_again_with_the_same_bytes_and_timestamp(tmp_path):
    spool, broker = _spool(tmp_path), Broker(up=False)
    resent = []
    sender = SpoolSender(spool, broker, retry_backoff_s=0.0, on_resent=resent.append)
    spool.append(topics.AD_EVENTS, b"7", b"click-1", timestamp_ms=1_800_000_000_500)
    _drain(sender)  # sent, refused, sent again, refused
    broker.up = True
    _drain(sender)
    assert spool.pending == 0
    assert len(set(broker.sent)) == 1 and len(broker.sent) >= 2
    assert broker.sent[0] == (topics.AD_EVENTS, b"7", b"click-1", 1_800_000_000_500)
    assert sum(resent) == len(broker.sent) - 1


def test_after_a_restart_every_unacknowledged_record_is_sent_again_in_order(tmp_path):
    spool, broker = _spool(tmp_path), Broker()
    sender = SpoolSender(spool, broker)
    for i in range(5):
        spool.append(topics.AD_EVENTS, b"7", b"event-%d" % i)
    broker.silent = True
    sender.pump()  # all five handed over; the broker acknowledges only events 1 and 3
    broker.waiting[1](None, None)
    broker.waiting[3](None, None)
    sender.pump()
    spool.close()  # the process ends with 0, 2 and 4 unacknowledged

    again, broker_again = _spool(tmp_path), Broker()
    assert again.restored == 3
    resent = []
    sender_again = SpoolSender(again, broker_again, on_resent=resent.append)
    _drain(sender_again)
    assert _values(broker_again) == [b"event-0", b"event-2", b"event-4"]
    assert sum(resent) == 3 and again.pending == 0


def test_a_process_killed_after_its_answers_loses_none_of_them(tmp_path):
    """A child appends (each append returns before the tracker would answer), then dies by SIGKILL."""
    script = ("import os, signal, sys\nfrom pathlib import Path\nfrom serving.spool import Spool, SpoolSettings\n"
              "spool = Spool(SpoolSettings(Path(sys.argv[1])))\n"
              "for i in range(200):\n    spool.append('ad.events', b'7', b'beacon-%d' % i)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO, timeout=60)
    assert done.returncode == -signal.SIGKILL
    spool, broker = _spool(tmp_path), Broker()
    _drain(SpoolSender(spool, broker))
    assert _values(broker) == [b"beacon-%d" % i for i in range(200)]


def test_a_torn_final_record_is_cut_off_and_the_records_before_it_are_kept(tmp_path):
    spool = _spool(tmp_path)
    for i in range(3):
        spool.append(topics.AD_EVENTS, b"7", b"event-%d" % i)
    spool.close()
    segment = tmp_path / segment_name(0)
    whole = segment.stat().st_size
    torn = encode_record(SpoolRecord(3, 1, topics.AD_EVENTS, b"7", b"event-3"))[:-4]
    with open(segment, "ab") as f:  # a crash in the middle of the fourth write
        f.write(torn)

    again = _spool(tmp_path)
    assert again.restored == 3 and again.torn_bytes == len(torn)
    assert segment.stat().st_size == whole
    again.append(topics.AD_EVENTS, b"7", b"event-4")
    broker = Broker()
    _drain(SpoolSender(again, broker))
    assert _values(broker) == [b"event-0", b"event-1", b"event-2", b"event-4"]


def test_a_full_spool_refuses_new_records_and_keeps_every_accepted_one(tmp_path):
    spool, broker = _spool(tmp_path, max_bytes=SMALL), Broker(up=False)
    sender = SpoolSender(spool, broker)
    accepted = 0
    with pytest.raises(SpoolFull):
        while True:
            spool.append(topics.AD_EVENTS, b"7", b"x" * 500)
            accepted += 1
    assert 100 < accepted and spool.spool_bytes <= SMALL and spool.pending == accepted
    broker.up = True
    sender._resume_at = 0.0
    _drain(sender)
    assert len(set(_values(broker))) == 1 and spool.pending == 0
    spool.append(topics.AD_EVENTS, b"7", b"after")  # room again once the broker took the records
    _drain(sender)
    assert spool.pending == 0


def test_segments_the_broker_took_in_full_are_deleted(tmp_path):
    spool, broker = _spool(tmp_path, max_bytes=1024 * 1024), Broker()
    sender = SpoolSender(spool, broker)
    for i in range(600):  # ~330 KB: six segments of 64 KiB
        spool.append(topics.AD_EVENTS, b"7", b"y" * 500)
        if i % 50 == 0:
            _drain(sender)
    _drain(sender)
    assert spool.pending == 0
    segments = sorted(tmp_path.glob("*.log"))
    assert len(segments) == 1 and spool.spool_bytes <= 64 * 1024 + 600  # only the open one is left
    spool.close()
    assert list(tmp_path.glob("*.log")) == [] and list(tmp_path.glob("*.acks")) == []


def test_a_segment_with_one_record_pending_is_kept(tmp_path):
    spool, broker = _spool(tmp_path, max_bytes=1024 * 1024), Broker()
    sender = SpoolSender(spool, broker)
    for _ in range(300):
        spool.append(topics.AD_EVENTS, b"7", b"z" * 500)
    broker.silent = True
    sender.pump()
    for callback in broker.waiting[1:]:
        callback(None, None)
    sender.pump()
    spool.close()
    assert [p.name for p in tmp_path.glob("*.log")] == [segment_name(0)]
    again, broker_again = _spool(tmp_path), Broker()
    _drain(SpoolSender(again, broker_again))
    assert _values(broker_again) == [b"z" * 500] and not list(tmp_path.glob("*.log"))


def test_a_fatal_producer_error_replaces_the_producer_and_sends_its_records_again(tmp_path):
    spool = _spool(tmp_path)
    producers = []

    def make(on_error):
        producers.append(Broker())
        return producers[-1](on_error)

    sender = SpoolSender(spool, make)
    spool.append(topics.AD_EVENTS, b"7", b"event-0")
    producers[0].silent = True  # the first producer never reports
    sender.pump()
    producers[0].on_error(Broker.Error("Fatal: out of order sequence", fatal=True))
    _drain(sender)
    assert len(producers) == 2 and producers[0].purged
    assert _values(producers[1]) == [b"event-0"] and spool.pending == 0


def test_two_trackers_never_share_a_spool_folder(tmp_path):
    spool = _spool(tmp_path)
    with pytest.raises(SpoolLocked, match="--spool-dir"):
        _spool(tmp_path)
    spool.close()
    _spool(tmp_path).close()


def test_the_default_spool_folder_is_under_the_platform_state_one_per_port():
    assert default_spool_dir({"ADSERVE_HOME": "/srv/adserve"}, 8081) == Path(
        "/srv/adserve/state/tracker-spool/port-8081")
    assert default_spool_dir({}, 9000).parts[-2:] == ("tracker-spool", "port-9000")


def test_the_sender_running_on_the_event_loop_delivers_and_close_keeps_what_is_left(tmp_path):
    spool, broker = _spool(tmp_path), Broker()

    async def scenario():
        sender = SpoolSender(spool, broker)
        sender.start()
        spool.append(topics.AD_EVENTS, b"7", b"event-0")
        sender.wake()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if not spool.pending:
                break
        broker.up = False
        spool.append(topics.AD_EVENTS, b"7", b"event-1")
        return sender.close(timeout_s=0.2)

    assert asyncio.run(scenario()) == 1
    assert [p.name for p in tmp_path.glob("*.log")] == [segment_name(0)]
    assert _spool(tmp_path).restored == 1


# the tracker: 503 with Retry-After when the spool is full -----------------------------------------------------------
KEYS = TokenKeys({"k1": b"spool-test-key-0123456"}, active="k1")
NOW = 1_800_000_000_000


def test_a_full_spool_answers_503_with_retry_after_and_counts_it(tmp_path):
    spool = _spool(tmp_path, max_bytes=SMALL)
    tracker = Tracker(KEYS, lambda topic, key, value: spool.append(topic, key, value), clock=lambda: NOW / 1000)
    def token(n: int) -> str:  # one impression each: a replayed token is kept once (test_beacon_replays below)
        return KEYS.sign(TokenClaims(impression_id=f"req-{n}:1", ad_id=71, campaign_id=7, price_micros=1_000_000,
                                     billing="CLICK", landing_url="https://shop.example/a",
                                     expires_ms=NOW + 3_600_000, served_ms=NOW - 4_000))

    async def scenario():
        statuses = []
        async with TestClient(TestServer(tracker.app())) as client:
            while len(statuses) < 3_000 and sum(status == 503 for status, _ in statuses) < 20:
                async with client.get("/v1/impression", params={"t": token(len(statuses))}) as r:
                    statuses.append((r.status, r.headers.get("Retry-After")))
        return statuses

    statuses = asyncio.run(scenario())
    accepted = sum(1 for status, _ in statuses if status == 204)
    refused = [retry for status, retry in statuses if status == 503]
    assert accepted == spool.pending and accepted + len(refused) == len(statuses) and len(refused) == 20
    assert set(refused) == {"5"}
    assert statuses[:accepted] == [(204, None)] * accepted  # nothing refused before the spool was full
    samples = {s.labels.get("reason"): s.value for m in tracker.spool_rejections.collect() for s in m.samples
               if s.name.endswith("_total")}
    assert samples == {"full": len(refused)}


def test_a_spool_that_cannot_write_answers_503_never_a_204(tmp_path):
    def broken(topic, key, value):
        raise OSError(28, "No space left on device")

    tracker = Tracker(KEYS, broken, clock=lambda: NOW / 1000)
    token = KEYS.sign(TokenClaims(impression_id="req-2:1", ad_id=71, campaign_id=7, price_micros=1_000_000,
                                  billing="CLICK", landing_url="https://shop.example/a", expires_ms=NOW + 3_600_000,
                                  served_ms=NOW - 4_000))

    async def scenario():
        async with TestClient(TestServer(tracker.app())) as client:
            async with client.get("/v1/click", params={"t": token}, allow_redirects=False) as r:
                return r.status

    assert asyncio.run(scenario()) == 503


def test_the_spool_metrics_are_on_the_tracker_page(tmp_path):
    spool = _spool(tmp_path)
    tracker = Tracker(KEYS, lambda *record: None)
    tracker.watch_spool(spool)
    spool.append(topics.AD_EVENTS, b"7", b"v")
    from prometheus_client import generate_latest

    page = generate_latest(tracker.registry).decode()
    for name in ("adserve_tracker_spool_bytes", "adserve_tracker_spool_pending_records 1.0",
                 "adserve_tracker_spool_resent_total", "adserve_tracker_delivery_failures_total"):
        assert name in page


def test_a_replayed_token_is_answered_every_time_and_kept_once_until_it_expires(tmp_path):
    spool = _spool(tmp_path, max_bytes=SMALL)
    now = [NOW]
    tracker = Tracker(KEYS, lambda topic, key, value: spool.append(topic, key, value), clock=lambda: now[0] / 1000)
    token = KEYS.sign(TokenClaims(impression_id="req-1:1", ad_id=71, campaign_id=7, price_micros=1_000_000,
                                  billing="CLICK", landing_url="https://shop.example/a", expires_ms=NOW + 60_000,
                                  served_ms=NOW - 4_000))

    async def scenario():
        async with TestClient(TestServer(tracker.app())) as client:
            statuses = []
            for path in ["/v1/impression"] * 500 + ["/v1/click"] * 500:
                async with client.get(path, params={"t": token}, allow_redirects=False) as r:
                    statuses.append(r.status)
            now[0] = NOW + 61_000
            async with client.get("/v1/impression", params={"t": token}) as r:
                statuses.append(r.status)
            return statuses

    statuses = asyncio.run(scenario())
    assert statuses == [204] * 500 + [302] * 500 + [410]  # every replay answered; the expired token refused
    assert spool.pending == 2  # one impression and one click kept
    replays = {s.labels["type"]: s.value for m in tracker.replays.collect() for s in m.samples
               if s.name.endswith("_total")}
    assert replays == {"IMPRESSION": 499, "CLICK": 499}
