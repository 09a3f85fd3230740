"""URL converters the services share: a path segment that must be a msgId, so a route such as
``/dlq/<msgid:msg_id>`` does not also match its siblings (``/dlq/purge``, ``/dlq/audit``) and
advertise their methods in ``Allow`` (issue 12.10)."""

from __future__ import annotations

from flask import Flask
from werkzeug.routing import BaseConverter

from clepsydra_core.msgid import MSG_ID_PATTERN


class MsgIdConverter(BaseConverter):
    """``<msgid:name>``: 32 hex digits as :data:`clepsydra_core.msgid.MSG_ID_PATTERN` says."""

    regex = MSG_ID_PATTERN[1:-1]


def register_converters(app: Flask) -> None:
    app.url_map.converters["msgid"] = MsgIdConverter
