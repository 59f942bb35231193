"""The staff dashboard over HTTP and WebSocket: contents, permissions, the double-decision race."""

from __future__ import annotations

import re
import threading

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from support.asgi import application
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import refund_ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def heard_after(approver, write) -> list[dict]:  # noqa: ANN001
    """What an approver's open dashboard socket hears: its first frame, then whatever ``write`` (run
    in the database's thread) makes it hear within 5 s, if anything."""

    async def listen() -> list[dict]:
        socket = WebsocketCommunicator(
            application, "/ws/staff/approvals/", headers=[(b"origin", b"http://localhost"), (b"host", b"localhost")]
        )
        socket.scope["user"] = approver
        connected, _ = await socket.connect()
        assert connected
        heard = [await socket.receive_json_from(timeout=5)]
        await database_sync_to_async(write)()
        if not await socket.receive_nothing(timeout=5, interval=0.05):
            heard.append(await socket.receive_json_from())
        await socket.disconnect()
        return heard

    return async_to_sync(listen)()


def paused(sandbox, number: str):  # noqa: ANN001
    ticket, order = refund_ticket(sandbox, number=number)
    advance(ticket.pk)
    return ticket, ApprovalRequest.objects.get(ticket=ticket)


def test_the_dashboard_lists_pending_requests_oldest_first_with_what_staff_need(sandbox, client, approver):
    first_ticket, first = paused(sandbox, "D-1001")
    _, second = paused(sandbox, "D-1002")
    client.force_login(approver)

    page = client.get("/staff/approvals/").content.decode()

    assert page.index(f'id="approval-{first.pk}"') < page.index(f'id="approval-{second.pk}"')
    assert "$649.00" in page and "D-1001" in page and first_ticket.customer.email in page
    assert "refunds above $200.00 need a staff approval" in page
    assert "Please refund my order D-1001" in page  # the conversation
    assert "waiting" in page and "expires in" in page


def test_a_decision_from_the_dashboard_is_recorded_and_shown_in_the_history(sandbox, client, approver):
    _, approval = paused(sandbox, "D-1003")
    client.force_login(approver)

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "reject", "note": "duplicate"})

    assert response.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.note) == (ApprovalStatus.REJECTED, approver, "duplicate")
    history = client.get("/staff/approvals/history/").content.decode()
    assert "duplicate" in history and "approver" in history
    assert f'id="approval-{approval.pk}"' not in client.get("/staff/approvals/pending/").content.decode()


def _stale_decision(sandbox, approver, number: str, **headers: str):  # noqa: ANN001
    """A rejection sent from a dashboard read before the person signed in again elsewhere: the
    page's token is of the CSRF secret the sign-in replaced."""
    _, approval = paused(sandbox, number)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(approver)
    page = browser.get("/staff/approvals/").content.decode()
    stale = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
    old_secret = browser.cookies["csrftoken"].value
    # Signed in again in another tab: Django gave the browser a new CSRF secret (as on sign-in).
    del browser.cookies["csrftoken"]
    browser.get("/staff/approvals/")
    assert browser.cookies["csrftoken"].value != old_secret
    response = browser.post(
        f"/staff/approvals/{approval.pk}/decide/",
        {"decision": "reject", "note": "Typed before signing in again", "csrfmiddlewaretoken": stale},
        headers=headers,
    )
    return approval, response


def test_a_decision_from_a_page_older_than_the_sign_in_is_refused_with_a_page_that_says_nothing_was_done(
    sandbox,  # noqa: ANN001
    approver,  # noqa: ANN001
):
    approval, response = _stale_decision(sandbox, approver, "D-5001", Referer="http://testserver/staff/approvals/")

    assert response.status_code == 403
    page = response.content.decode()
    assert "Nothing was done: the page was out of date" in page
    assert "you signed in again since" in page
    assert 'href="/staff/approvals/" id="csrf-failure-back">Back to the page</a>' in page
    assert "CSRF verification failed" not in page
    assert "Typed before signing in again" not in page  # nothing of the posted form comes back
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING


@pytest.mark.parametrize(
    "referer", ["https://elsewhere.example/staff/approvals/", "http://testserver.evil.example/", "", "/staff/"]
)
def test_the_way_back_from_a_refused_form_is_this_sites_page_only(sandbox, approver, referer):  # noqa: ANN001
    _, response = _stale_decision(sandbox, approver, "D-5002", **({"Referer": referer} if referer else {}))

    assert response.status_code == 403
    assert 'href="/" id="csrf-failure-back">Back to the start</a>' in response.content.decode()


def test_the_way_back_from_a_dashboard_shown_at_the_decision_address_is_the_dashboard(sandbox, approver):  # noqa: ANN001
    """After a decision the dashboard refused (a 400 or 409), the page stands at the decision's
    address, which answers only POST: back from a stale form on it leads to the dashboard, not a 405."""
    _, response = _stale_decision(sandbox, approver, "D-5003", Referer="http://testserver/staff/approvals/7/decide/")

    assert response.status_code == 403
    assert 'href="/staff/approvals/" id="csrf-failure-back">Back to the page</a>' in response.content.decode()


@pytest.mark.parametrize("who", ["customer", "plain_staff"])
def test_customers_and_staff_without_the_permission_are_refused_on_every_endpoint(sandbox, who):
    ticket, approval = paused(sandbox, "D-2001" if who == "customer" else "D-2002")
    user = ticket.customer.user if who == "customer" else make_staff("nopermission", can_decide=False)
    client = Client()
    client.force_login(user)

    for url in ["/staff/approvals/", "/staff/approvals/pending/", "/staff/approvals/history/"]:
        assert client.get(url).status_code == 403, url
    response = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve"})
    assert response.status_code == 403
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


def test_anonymous_visitors_are_sent_to_sign_in(sandbox, client):
    _, approval = paused(sandbox, "D-3001")
    assert client.get("/staff/approvals/")["Location"].startswith("/accounts/login/")
    assert client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "approve"}).status_code == 302
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING


async def _ws_answer(user) -> str | int:  # noqa: ANN001
    """ "open" for a socket that stays open, else the close code the browser is given."""
    communicator = WebsocketCommunicator(
        application, "/ws/staff/approvals/", headers=[(b"origin", b"http://localhost"), (b"host", b"localhost")]
    )
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    if not connected:
        return f"refused at the handshake ({code}): the browser is given no close code, only a failure"
    answer: str | int = "open"
    if not await communicator.receive_nothing(timeout=0.3):
        output = await communicator.receive_output()
        # An approver's socket says it is listening; any other is closed with a code.
        answer = "open" if output.get("text") == '{"type": "ready"}' else output["code"]
    await communicator.disconnect()
    return answer


def test_only_approvers_get_live_dashboard_updates_and_the_others_are_told_not_allowed(approver, plain_staff):
    """The others' sockets are closed with 4403 after opening (not refused at the handshake), so the
    page says "not allowed" instead of reconnecting for ever."""
    from asgiref.sync import async_to_sync
    from django.contrib.auth.models import AnonymousUser

    assert async_to_sync(_ws_answer)(approver) == "open"
    assert async_to_sync(_ws_answer)(plain_staff) == 4403
    assert async_to_sync(_ws_answer)(AnonymousUser()) == 4403


def test_two_staff_deciding_at_once_the_first_wins_and_the_second_is_told(sandbox, live_server):
    _, approval = paused(sandbox, "D-4001")
    alice, bob = make_staff("alice-staff", can_decide=True), make_staff("bob-staff", can_decide=True)
    sessions = []
    for user in (alice, bob):
        c = Client()
        c.force_login(user)
        sessions.append(c.cookies["sessionid"].value)
    barrier = threading.Barrier(2)
    results: dict[str, httpx.Response] = {}

    def decide(name: str, session: str, decision: str) -> None:
        with httpx.Client(base_url=live_server.url, cookies={"sessionid": session}) as http:
            page = http.get("/staff/approvals/")
            token = http.cookies.get("csrftoken")
            barrier.wait()
            results[name] = http.post(
                f"/staff/approvals/{approval.pk}/decide/",
                data={
                    "decision": decision,
                    "note": "no",
                    "confirm_amount": str(approval.amount_cents),  # $649.00 is above the confirmation level
                    "csrfmiddlewaretoken": token,
                },
                headers={"Referer": live_server.url + "/staff/approvals/"},
            )
            assert page.status_code == 200

    threads = [
        threading.Thread(target=decide, args=("alice", sessions[0], "approve")),
        threading.Thread(target=decide, args=("bob", sessions[1], "reject")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    codes = sorted(r.status_code for r in results.values())
    assert codes == [302, 409], {k: (v.status_code, v.text[:300]) for k, v in results.items()}
    loser = next(r for r in results.values() if r.status_code == 409)
    approval.refresh_from_db()
    assert f"already {approval.status} by {approval.decided_by.username}" in loser.text, loser.text[
        loser.text.find("<main") :
    ][:600]
    assert approval.status in {ApprovalStatus.APPROVED, ApprovalStatus.REJECTED}


def test_a_request_on_a_ticket_a_person_took_is_refused_with_409_then_shown_withdrawn(sandbox, client, approver):
    """A person takes the ticket while its refund waits: approving it from the dashboard is refused
    as a conflict (409, nothing changed, the reason given); once the agent's run has ended, the
    request is in the history as withdrawn, by nobody, with the reason, and approving it again is
    refused the same way and says it was withdrawn."""
    from tickets import services as ticket_services

    ticket, approval = paused(sandbox, "D-4001")
    person = make_staff("person", can_decide=False)
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    client.force_login(approver)

    approve = {"decision": "approve", "confirm_amount": str(approval.amount_cents)}
    taken = client.post(f"/staff/approvals/{approval.pk}/decide/", approve)
    assert taken.status_code == 409
    assert "A person has had ticket" in taken.content.decode()
    assert ApprovalRequest.objects.get(pk=approval.pk).status == ApprovalStatus.PENDING

    advance(ticket.pk)  # the doorbell the take-over rang: the run ends and withdraws the request
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.WITHDRAWN

    again = client.post(f"/staff/approvals/{approval.pk}/decide/", approve)
    assert again.status_code == 409
    assert "was withdrawn" in again.content.decode() and "nothing was changed" in again.content.decode()
    history = client.get("/staff/approvals/history/").content.decode()
    row = history[history.index(f"<td>{approval.pk}</td>") :].split("</tr>")[0]
    assert 'class="badge withdrawn"' in row and "Withdrawn" in row
    assert "nobody (the agent withdrew it)" in row and "expired" not in row
    assert approval.note and approval.note in row
