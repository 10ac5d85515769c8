"""Hypothesis stateful test: the key-value RLMM against a brute-force model.

The model is a plain transcription of Kafka's ``RemoteLogMetadataCache`` /
``RemoteLogLeaderEpochState`` with Python dicts and sets; its lookups scan, and its size is the
pre-KIP-852 way (list the epoch's segments and sum). Random event sequences, valid and invalid,
go to both; every lookup and size must agree after every step.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from gateway.errors import InvalidStateTransitionError, RemoteResourceNotFoundError
from gateway.metadata.backend import MemoryBackend
from gateway.metadata.manager import RemoteLogMetadataManager
from gateway.metadata.model import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
    is_valid_segment_transition,
)
from gateway.metadata.sqlite import SQLiteBackend
from tests.unit.metadata.helpers import TP, seg_id

S = SegmentState


@dataclass
class EpochModel:
    offset_to_id: dict[int, uuid.UUID] = field(default_factory=dict)
    unreferenced: set[uuid.UUID] = field(default_factory=set)
    highest: int | None = None


class Model:
    def __init__(self) -> None:
        self.segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        self.epochs: dict[int, EpochModel] = {}

    def _epoch(self, epoch: int) -> EpochModel:
        return self.epochs.setdefault(epoch, EpochModel())

    def add(self, meta: RemoteLogSegmentMetadata) -> None:
        existing = self.segments.get(meta.segment_id.id)
        if not is_valid_segment_transition(existing.state if existing else None, meta.state):
            raise InvalidStateTransitionError("model")
        if existing is not None:  # a re-add replaces the earlier epochs (Kafka leaves them)
            for epoch, _ in existing.segment_leader_epochs:
                self._epoch(epoch).unreferenced.discard(meta.segment_id.id)
        for epoch, _ in meta.segment_leader_epochs:
            self._epoch(epoch).unreferenced.add(meta.segment_id.id)
        self.segments[meta.segment_id.id] = meta

    def update(self, upd: RemoteLogSegmentMetadataUpdate) -> None:
        if upd.state is S.COPY_SEGMENT_STARTED:  # the API's check comes first
            raise InvalidStateTransitionError("model")
        existing = self.segments.get(upd.segment_id.id)
        if existing is None:
            raise RemoteResourceNotFoundError("model")
        if not is_valid_segment_transition(existing.state, upd.state):
            raise InvalidStateTransitionError("model")
        meta, sid = existing.with_update(upd), upd.segment_id.id
        for epoch, start in meta.segment_leader_epochs:
            state = self._epoch(epoch)
            if upd.state is S.COPY_SEGMENT_FINISHED:
                end = meta.epoch_end(epoch)
                while state.offset_to_id and max(state.offset_to_id) >= start:
                    assert state.highest is not None
                    if state.highest > end:
                        break
                    state.unreferenced.add(state.offset_to_id.pop(max(state.offset_to_id)))
                old = state.offset_to_id.get(start)
                state.offset_to_id[start] = sid
                state.unreferenced.discard(sid)
                if old is not None:
                    state.unreferenced.add(old)
                state.highest = end if state.highest is None else max(state.highest, end)
            elif upd.state is S.DELETE_SEGMENT_STARTED:
                if state.offset_to_id.get(start) == sid:
                    del state.offset_to_id[start]
                state.unreferenced.add(sid)
            else:
                state.unreferenced.discard(sid)
                if not state.offset_to_id and not state.unreferenced:
                    del self.epochs[epoch]
        if upd.state is S.DELETE_SEGMENT_FINISHED:
            del self.segments[sid]
        else:
            self.segments[sid] = meta

    def lookup(self, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        state = self.epochs.get(epoch)
        if state is None:
            return None
        keys = [k for k in state.offset_to_id if k <= offset]
        if not keys:
            return None
        meta = self.segments[state.offset_to_id[max(keys)]]
        return None if offset > meta.epoch_end(epoch) else meta

    def listing(self, epoch: int) -> list[RemoteLogSegmentMetadata]:
        state = self.epochs.get(epoch)
        if state is None:
            return []
        ids = [*state.offset_to_id.values(), *state.unreferenced]
        return sorted((self.segments[i] for i in ids), key=lambda m: m.start_offset)


EPOCHS = range(4)
OFFSETS = st.integers(0, 60)


class ManagerVsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.rlmm: RemoteLogMetadataManager | None = None

    @initialize(sqlite=st.booleans())
    def open(self, sqlite: bool) -> None:
        self.rlmm = RemoteLogMetadataManager(
            SQLiteBackend(":memory:") if sqlite else MemoryBackend()
        )

    def teardown(self) -> None:
        if self.rlmm is not None:
            self.rlmm.close()

    def _both(self, event: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate) -> None:
        assert self.rlmm is not None
        errors: list[type[Exception] | None] = []
        for apply in (
            self.model.add if isinstance(event, RemoteLogSegmentMetadata) else self.model.update,
            self.rlmm.apply,
        ):
            try:
                apply(event)  # type: ignore[arg-type]
                errors.append(None)
            except (InvalidStateTransitionError, RemoteResourceNotFoundError) as exc:
                errors.append(type(exc))
        assert errors[0] == errors[1]

    @rule(
        n=st.integers(0, 7),
        start=OFFSETS,
        length=st.integers(0, 20),
        epochs=st.lists(st.sampled_from(EPOCHS), min_size=1, max_size=3, unique=True),
        size=st.integers(0, 1000),
        txn_empty=st.booleans(),
        data=st.data(),
    )
    def add(
        self,
        n: int,
        start: int,
        length: int,
        epochs: list[int],
        size: int,
        txn_empty: bool,
        data: st.DataObject,
    ) -> None:
        end = start + length
        epochs = sorted(epochs)[: length + 1]  # distinct start offsets need room
        starts = sorted(data.draw(st.lists(st.integers(start, end), min_size=len(epochs) - 1,
                                           max_size=len(epochs) - 1, unique=True)
                                  .filter(lambda xs: start not in xs)))  # fmt: skip
        pairs = tuple(zip(epochs, [start, *starts], strict=True))
        meta = RemoteLogSegmentMetadata(
            seg_id(n), start, end, 0, 1, 0, pairs, size, txn_index_empty=txn_empty
        )
        self._both(meta)

    @rule(n=st.integers(0, 7), state=st.sampled_from(list(S)))
    def update(self, n: int, state: S) -> None:
        self._both(RemoteLogSegmentMetadataUpdate(seg_id(n), 5, None, state, 2))

    @rule(epoch=st.sampled_from(EPOCHS), offset=OFFSETS)
    def lookup(self, epoch: int, offset: int) -> None:
        assert self.rlmm is not None
        if not self.model.segments and not self.model.epochs:
            return
        got = self.rlmm.remote_log_segment_metadata(TP, epoch, offset)
        assert got == self.model.lookup(epoch, offset)

    @invariant()
    def agree(self) -> None:
        if self.rlmm is None or not self.rlmm.partitions():
            return
        model = self.model
        for epoch in EPOCHS:
            listing = model.listing(epoch)
            got = self.rlmm.list_remote_log_segments(TP, epoch)
            assert sorted(got, key=lambda m: (m.start_offset, m.segment_id.id)) == sorted(
                listing, key=lambda m: (m.start_offset, m.segment_id.id)
            )
            assert self.rlmm.remote_log_size(TP, epoch) == sum(
                m.segment_size_in_bytes for m in listing
            )
            state = model.epochs.get(epoch)
            assert self.rlmm.highest_offset_for_epoch(TP, epoch) == (
                state.highest if state else None
            )
        assert self.rlmm.remote_log_size(TP) == sum(
            m.segment_size_in_bytes for m in model.segments.values()
        )
        assert {m.segment_id.id for m in self.rlmm.list_remote_log_segments(TP)} == set(
            model.segments
        )
        assert self.rlmm.segment_count(TP) == len(model.segments)


ManagerVsModel.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestManagerVsModel = ManagerVsModel.TestCase
