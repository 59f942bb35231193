"""A member of staff who changes their own password stays signed in, and so do their live pages.

Django keeps the session that changed the password (under a new key: update_session_auth_hash). A
socket opened before is told its sign-in changed and closes with 4401, which the pages answer by
reconnecting at once, with the browser's new cookie: live updates go on. (A socket of a sign-in that
really ended is refused on that reconnection: 4403.)
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client

from support.asgi import application
from tests.tickets.test_socket_ends_with_sign_in import _frames_until_quiet, _no_stream_left_over, ticket  # noqa: F401 (fixtures)
from tickets import services
from tickets.models import AuthorKind

pytestmark = pytest.mark.django_db(transaction=True)


def test_changing_ones_own_password_does_not_sign_the_live_pages_out(ticket):  # noqa: F811 (the fixture)
    admin = get_user_model().objects.create_superuser("lead-admin", "lead@example.test", "old-password-for-tests-1")
    client = Client()
    client.force_login(admin)
    cookie = client.cookies["sessionid"].value
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", f"sessionid={cookie}".encode())]

    async def scenario() -> list[dict]:
        ws = WebsocketCommunicator(application, f"/ws/staff/tickets/{ticket.pk}/", headers=headers)
        assert (await ws.connect())[0]
        assert await ws.receive_json_from(timeout=5) == {"type": "ready"}
        assert await ws.receive_nothing(timeout=0.5)

        response = await database_sync_to_async(client.post)(
            "/admin/password_change/",
            {
                "old_password": "old-password-for-tests-1",
                "new_password1": "a-new-strong-password-3377",
                "new_password2": "a-new-strong-password-3377",
            },
        )
        assert response.status_code == 302, response.status_code
        # Still signed in: the staff page opens.
        page = await database_sync_to_async(client.get)(f"/staff/tickets/{ticket.pk}/")
        assert page.status_code == 200, page.status_code
        assert admin.pk == int(await database_sync_to_async(lambda: client.session["_auth_user_id"])())

        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Any news on my kettle?"
        )
        closing = await _frames_until_quiet(ws, quiet=1.5)
        await ws.disconnect()
        # The page reconnects with the cookie the browser has now.
        fresh = f"sessionid={client.cookies['sessionid'].value}".encode()
        again = WebsocketCommunicator(
            application, f"/ws/staff/tickets/{ticket.pk}/", headers=[*headers[:2], (b"cookie", fresh)]
        )
        assert (await again.connect())[0]
        assert await again.receive_json_from(timeout=5) == {"type": "ready"}
        assert await again.receive_nothing(timeout=0.5)
        await database_sync_to_async(services.message_post)(
            ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, body="Hello? Anyone there?"
        )
        frames = await _frames_until_quiet(again, quiet=1.5)
        await again.disconnect()
        return closing, frames

    closing, frames = async_to_sync(scenario)()
    assert {"type": "closed", "code": 4403} not in closing, closing
    assert {"type": "closed", "code": 4401} in closing or {"type": "changed"} in closing, closing
    assert {"type": "changed"} in frames and not any(f.get("type") == "closed" for f in frames), (
        "a member of staff who changed their own password is still signed in, yet the ticket page's live "
        f"updates did not come back on reconnection: frames {frames}"
    )
