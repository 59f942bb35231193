"""Every customer page checked with axe-core in a real browser: no violation of any rule it
runs by default (WCAG 2 A and AA, and its best practices), a skip link first in the tab order,
a focus ring that can be seen on every stop of the tab order, the chat's conversation a log
that is announced and reachable, the message box focused when the chat opens."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe

from agents.models import AgentRun, RunStatus
from tests.browser.conftest import SCREENSHOTS, Stack, sign_in
from tests.browser.test_customer_chat import LONG_POLICY, wait_for_agent_messages
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import ActorKind, AuthorKind, HelpArticle, Message, TicketStatus

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

AXE = Axe()

# The focused element, and how its focus ring stands out against what lies behind it (WCAG 1.4.11: 3:1).
FOCUS_RING = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const rgba = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  let behind = [255, 255, 255];
  for (let up = el.parentElement; up; up = up.parentElement) {
    const bg = rgba(getComputedStyle(up).backgroundColor);
    if (bg.length === 3 || bg[3] > 0) { behind = bg; break; }
  }
  const style = getComputedStyle(el);
  const a = lum(rgba(style.outlineColor)), b = lum(behind);
  return {
    what: el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + " " + (el.textContent || "").trim().slice(0, 24),
    style: style.outlineStyle,
    width: parseFloat(style.outlineWidth),
    contrast: Math.round(((Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)) * 100) / 100,
  };
}"""

FIRST_TABBABLE = """() => {
  const all = document.querySelectorAll('a[href], button:not([disabled]), select, [tabindex], '
    + 'input:not([type=hidden]):not([disabled]), textarea:not([disabled])');
  const first = Array.from(all).find(el => el.tabIndex >= 0);
  return first ? first.outerHTML : null;
}"""


def violations(page) -> list[str]:  # noqa: ANN001
    """axe's violations on the page as it is now, one readable line per failing element."""
    results = AXE.run(page)
    return [
        f"{rule['id']} ({rule['impact']}): {node['target']} {node.get('failureSummary', '')}"
        for rule in results.response["violations"]
        for node in rule["nodes"]
    ]


def check_page(page, where: str) -> None:  # noqa: ANN001
    """No axe violation; the skip link is the first stop of the tab order and leads to the main content."""
    found = violations(page)
    assert found == [], f"{where}:\n" + "\n".join(found)
    first = page.evaluate(FIRST_TABBABLE)
    assert first is not None and 'class="skip-link"' in first and 'href="#main"' in first, (where, first)
    assert page.locator("main#main").count() == 1, where


def tab_stops(page, limit: int = 30) -> list[dict]:  # noqa: ANN001
    """The focus ring of each element the Tab key reaches, once round the page."""
    stops: list[dict] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        ring = page.evaluate(FOCUS_RING)
        if ring is None:
            continue
        if stops and ring["what"] == stops[0]["what"]:
            break
        stops.append(ring)
    return stops


def assert_rings_visible(page, where: str) -> None:  # noqa: ANN001
    stops = tab_stops(page)
    assert len(stops) >= 3, (where, stops)
    weak = [s for s in stops if s["style"] == "none" or s["width"] < 2 or s["contrast"] < 3]
    assert weak == [], f"{where}: focus rings that are hard to see: {weak}"


def test_the_sign_in_page_and_the_404_page_pass_axe(live: Stack, browser):  # noqa: ANN001
    context = browser.new_context(viewport={"width": 1100, "height": 820})
    page = context.new_page()
    page.goto(live.url("/accounts/login/"))
    check_page(page, "sign in")
    assert_rings_visible(page, "sign in")

    page.fill("#id_username", "nobody")
    page.fill("#id_password", "wrong password")
    page.click("main form button[type=submit]")
    page.locator(".error[role=alert]").wait_for()
    check_page(page, "sign in, refused")

    page.goto(live.url("/no-such-page/"))
    assert page.locator("h1").inner_text() == "We couldn't find that page"
    check_page(page, "404")
    context.close()


def test_my_tickets_and_a_new_ticket_pass_axe_empty_full_and_refused(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    page = sign_in(browser, live, customer)
    page.reload()  # as a customer arrives: nothing focused yet
    page.keyboard.press("Tab")
    skip = page.locator(".skip-link")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    assert skip.inner_text() == "Skip to content" and skip.is_visible()
    box = skip.bounding_box()
    assert box["y"] >= 0 and box["x"] >= 0  # shown on the screen while it has focus
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"  # past the top bar
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('main') !== null")

    page.goto(live.url("/tickets/"))
    assert page.locator(".empty h2").inner_text() == "No tickets yet"
    check_page(page, "my tickets, empty")
    assert_rings_visible(page, "my tickets, empty")

    page.goto(live.url("/tickets/new/"))
    check_page(page, "new ticket")
    assert_rings_visible(page, "new ticket")
    page.fill("#id_body", "   ")  # passes the browser's own check, refused by ours
    page.click("form.new-ticket button[type=submit]")
    page.locator("#new-ticket-error").wait_for()
    check_page(page, "new ticket, refused")
    assert page.get_attribute("#id_body", "aria-describedby") == "new-ticket-error"
    assert page.get_attribute("#id_body", "aria-invalid") == "true"

    ticket_services.ticket_open(customer=customer, subject="Where is my kettle?", body="Hello there")
    page.goto(live.url("/tickets/"))
    page.locator(".ticket-row").first.wait_for()
    check_page(page, "my tickets, with a ticket")
    assert_rings_visible(page, "my tickets, with a ticket")
    page.context.close()


def test_the_chat_passes_axe_with_messages_while_streaming_and_with_a_send_that_failed(live: Stack, browser):  # noqa: ANN001
    HelpArticle.objects.create(slug="refund-policy", title="Refund policy", body=LONG_POLICY)
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="A long conversation", body="Hello there")
    wait_until(
        lambda: Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).exists(),
        timeout=30,
        what="the agent's first answer",
    )
    for n in range(8):  # enough to scroll: the log must then be reachable from the keyboard
        ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.AGENT, body=f"Earlier answer number {n}.")
    ticket_services.event_append(
        ticket=ticket,
        kind="refund_succeeded",
        actor_kind=ActorKind.AGENT,
        payload={"label": "Refund of $12.00 issued"},
        is_public=True,
    )
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    wait_for_agent_messages(page, 9)
    page.wait_for_function("() => !window.__chat.state().typing")

    assert page.evaluate("document.activeElement.id") == "chat-input"  # ready to type on open
    conversation = page.get_by_role("log", name="Conversation")
    assert conversation.get_attribute("aria-live") == "polite"
    assert conversation.get_attribute("tabindex") == "0"
    assert conversation.locator("#chat-log li.msg").count() >= 10
    assert page.evaluate("(el => el.scrollHeight > el.clientHeight)(document.getElementById('chat-scroll'))")
    check_page(page, "the chat")
    assert_rings_visible(page, "the chat")
    assert "div#chat-scroll" in [stop["what"].split(" ")[0] for stop in tab_stops(page)]

    page.fill("#chat-input", "What is your refund policy?")
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => (window.__chat.state().streamText || '').length > 20")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "a11y-streaming.png"))
    check_page(page, "the chat, while an answer streams in")
    wait_for_agent_messages(page, 10)

    page.context.set_offline(True)
    page.fill("#chat-input", "This one will not go out yet")
    page.press("#chat-input", "Enter")
    page.locator("#chat-log .msg-retry").wait_for()
    check_page(page, "the chat, a send that failed")
    page.context.set_offline(False)
    page.locator("#chat-log li.msg.from-customer[data-seq]", has_text="This one will not go out yet").wait_for()
    page.context.close()


def test_a_closed_tickets_chat_passes_axe(live: Stack, browser):  # noqa: ANN001
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="All done", body="Hello there")
    wait_until(
        lambda: Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).exists(),
        timeout=30,
        what="the agent's first answer",
    )
    wait_until(
        lambda: not AgentRun.objects.filter(ticket=ticket, status=RunStatus.RUNNING).exists(),
        timeout=30,
        what="the agent to finish its run",
    )
    ticket_services.ticket_transition(ticket=ticket, to_status=TicketStatus.CLOSED, actor_kind=ActorKind.STAFF)
    page = sign_in(browser, live, customer)
    page.goto(live.url(f"/tickets/{ticket.pk}/"))
    assert page.locator("#chat-input").is_disabled()
    check_page(page, "a closed ticket's chat")
    page.context.close()
