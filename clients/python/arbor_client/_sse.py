"""Server-sent events, parsed from a response's lines (the server's framing: ``id``,
``event``, ``data``; comments and keep-alives skipped)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """One event of a stream: its ``id`` (absent on ``status`` and ``end``), its ``event``
    name and its ``data`` (decoded from JSON)."""

    event: str
    data: Any
    id: str | None = None


class Parser:
    """Feeds lines; yields an :class:`Event` at each blank line that ends one."""

    def __init__(self) -> None:
        self._event = "message"
        self._data: list[str] = []
        self._id: str | None = None
        #: The stream's last event id: set by every event that names one, with data or not
        #: (what a reconnect sends as ``Last-Event-ID``).
        self.last_id: str | None = None

    def feed(self, line: str) -> Event | None:
        if line == "":
            if self._id is not None:
                self.last_id = self._id
            if not self._data:
                self._event, self._id = "message", None
                return None
            text = "\n".join(self._data)
            try:
                data: Any = json.loads(text)
            except ValueError:
                data = text
            event = Event(event=self._event, data=data, id=self._id)
            self._event, self._data, self._id = "message", [], None
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None
