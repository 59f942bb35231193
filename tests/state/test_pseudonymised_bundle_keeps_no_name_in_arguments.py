"""A customer's name or email passed by a model as an "order number" is pseudonymised like anywhere
else in the bundle: only an order number of the bundle is kept as it is in arguments.
"""

from __future__ import annotations

import pytest

from agents.llm_openai import OpenAIChatModel
from agents.models import ToolCall
from agents.runner import advance
from tests.agents.openai_server import OpenAIServer
from tests.conftest import make_customer, make_order
from tests.state.conftest import bundle_bytes, export
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.mark.parametrize("typed", ["Dorothea Quimby", "dorothea.quimby@mail.example"], ids=["name", "email"])
def test_a_name_or_email_the_model_took_for_an_order_number_is_pseudonymised(tmp_path, typed):  # noqa: ANN001
    customer = make_customer("dorothea")
    customer.name, customer.email = "Dorothea Quimby", "dorothea.quimby@mail.example"
    customer.save()
    make_order(customer, number="O-7301")
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Where is my parcel", body=f"Where is my order? It is under {typed}."
    )
    server = OpenAIServer().start()
    try:
        server.enqueue_tool_calls([("lookup_order", {"order_number": typed})])
        server.enqueue_text("I could not find that order; could you give me the order number (like O-1234)?")
        model = OpenAIChatModel(model="gpt-test", api_key="k", base_url=server.url, max_retries=0, timeout=10)
        advance(ticket.pk, model=model)
    finally:
        server.stop()
    assert ToolCall.objects.filter(ticket=ticket, name="lookup_order", arguments__order_number=typed).exists()

    data = bundle_bytes(export(tmp_path, ticket)).decode()  # the default bundle: pseudonymised

    leaked = [personal for personal in ("Quimby", "dorothea.quimby@mail.example") if personal in data]
    assert leaked == [], (
        f"the customer's personal data {leaked} is carried verbatim in a pseudonymised bundle (the model's "
        f"lookup_order call took {typed!r} for an order number; an order number not of the bundle is rewritten)"
    )
