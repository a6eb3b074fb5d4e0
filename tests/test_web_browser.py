"""The web chat (`tramita serve` / `tramita web`), in a real browser and over HTTP.

The browser tests drive headless Chromium from Debian's packages through Selenium, pointed at
/usr/bin/chromedriver (Selenium Manager never runs, so nothing is downloaded). They skip, saying
so, only when chromium or chromedriver is not installed (`.ci/run` installs both). The server runs
in-process (`serve_in_thread`, 127.0.0.1) on a fresh copy of the NovaOps data with the scripted
model profile. Screenshots of both flows go to `TRAMITA_SCREENSHOT_DIR` (default `out/web/`).

The HTTP tests (streaming, bind refusal, the SSO header mode) need no browser.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_graph import REPO, audit_rows, db_changes, db_snapshot, expense_status

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
_MISSING = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
needs_browser = pytest.mark.skipif(
    bool(_MISSING), reason=f"headless browser not installed ({', '.join(_MISSING)} missing): "
                           "apt-get install chromium chromium-driver (.ci/run does)")

USER = "E006"  # Luciana Moreira, Finance Manager: approves expenses up to 5,000 USD
EXPENSE = "EXP-0264"  # pending, 476.07 USD, Ana Paula Ferreira's (E054): E006 may approve it
DOC_QUESTION = "Qual é o limite de gastos com hotel na política de viagens?"
APPROVE = f"aprovar a despesa {EXPENSE}"
TICKET = "abrir um chamado de prioridade P2 para o serviço de VPN"  # fills priority; service and title pending
TURN_SECONDS = 240  # the first turn of a process loads the embedding model on a shared CPU


def screenshot_dir() -> Path:
    """Where the flows' screenshots go (env TRAMITA_SCREENSHOT_DIR, default out/web/)."""
    path = Path(os.environ.get("TRAMITA_SCREENSHOT_DIR") or REPO / "out" / "web")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def web_app(novaops: Path, novaops_services: Any) -> Iterator[Any]:
    """The server's app over a fresh data copy (scripted model), with its checkpointer open."""
    from graph.builder import compile_graph
    from graph.checkpointer import open_checkpointer
    from tramita.shell.server import TurnServer, create_app

    with open_checkpointer(novaops_services.settings.checkpoint_url) as saver:
        yield lambda **kw: create_app(TurnServer(compile_graph(checkpointer=saver), server_id="web-test",
                                                 services=novaops_services, **kw))


@pytest.fixture
def web_url(web_app: Any) -> Iterator[str]:
    """The base URL of a real uvicorn server on 127.0.0.1 serving the chat."""
    from tramita.shell.server import serve_in_thread

    with serve_in_thread(web_app()) as url:
        yield url


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Headless Chromium at 1280x900 through the system chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # belt and braces: Selenium Manager may never download
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--lang=pt-BR", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


# ----------------------------------------------------------------------------- page helpers
def _open(driver: Any, url: str, user: str = USER) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver.get(url + "/")
    WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
    Select(driver.find_element(By.ID, "lang")).select_by_value("pt")
    Select(driver.find_element(By.ID, "user")).select_by_value(user)


def _finished(driver: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return [b for b in driver.find_elements(By.CSS_SELECTOR, ".turn .msg.bot") if b.get_attribute("aria-busy") is None]


def _say(driver: Any, text: str) -> Any:
    """Type `text`, press Enter, wait for the answer; returns the finished bot message."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    before = len(_finished(driver))
    box = driver.find_element(By.ID, "message")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    return _wait_answer(driver, before)


def _wait_answer(driver: Any, before: int) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, TURN_SECONDS).until(lambda d: len(_finished(d)) > before)
    return _finished(driver)[-1]


def _shot(driver: Any, name: str) -> Path:
    path = screenshot_dir() / name
    assert driver.save_screenshot(str(path)), path
    return path


def _confirmation_card(driver: Any) -> Any:
    from selenium.webdriver.common.by import By

    bot = _say(driver, APPROVE)
    card = bot.find_element(By.CSS_SELECTOR, ".confirm-card")
    assert EXPENSE in card.text and "Confirma" in card.text, card.text
    return card


# ----------------------------------------------------------------------------- browser flows
@needs_browser
def test_browser_question_citation_and_confirmed_approval(browser: Any, web_url: str, novaops: Path) -> None:
    """A documents question shows its answer with a citation link that opens the cited passage;
    an approval shows a confirmation card whose Confirm button writes the expense and exactly one
    audit row."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, web_url)
    _shot(browser, "00-start.png")
    bot = _say(browser, DOC_QUESTION)
    answer = bot.find_element(By.CSS_SELECTOR, ".answer").text
    assert "[doc-pol-travel]" in answer, answer  # the citation tag is shown verbatim
    link = bot.find_element(By.CSS_SELECTOR, 'a.cite[data-cite="doc-pol-travel"]')
    assert link.text == "[doc-pol-travel]"
    _shot(browser, "01-question-answer.png")
    link.click()
    panel = WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, link.get_attribute("aria-controls")))
    assert link.get_attribute("aria-expanded") == "true"
    assert "Política de Viagens Corporativas" in panel.find_element(By.TAG_NAME, "h3").text  # the front matter title
    passages = [p.text for p in panel.find_elements(By.CSS_SELECTOR, ".passage")]
    assert passages and all(passages) and any("Hospedagem" in p for p in passages), passages
    _shot(browser, "02-citation-passage.png")
    details = bot.find_element(By.CSS_SELECTOR, "details.details")
    details.find_element(By.TAG_NAME, "summary").click()
    assert "synthesize" in details.text and "LLM" in details.text

    audit_before, snapshot = audit_rows(novaops), db_snapshot(novaops)
    card = _confirmation_card(browser)
    _shot(browser, "03-confirmation-card.png")
    before = len(_finished(browser))
    card.find_element(By.CSS_SELECTOR, "button.confirm").click()
    done = _wait_answer(browser, before)
    assert EXPENSE in done.text and "aprovada" in done.text, done.text
    users = [u.text for u in browser.find_elements(By.CSS_SELECTOR, ".msg.user .text")]
    assert users[-1] == "sim"  # the button sent the same explicit turn a typed "sim" would
    _shot(browser, "04-confirmed.png")
    assert expense_status(novaops, EXPENSE) == "approved"
    assert audit_rows(novaops) == audit_before + 1 and audit_rows(novaops, EXPENSE) == 1
    changes = db_changes(novaops, snapshot)
    assert changes["expenses"] == {EXPENSE} and len(changes["audit_log"]) == 1 and len(changes) == 2, changes


@needs_browser
def test_browser_cancelled_approval_writes_nothing(browser: Any, web_url: str, novaops: Path) -> None:
    """A transaction being collected shows its filled and pending parameters; then, in a new
    conversation, the same approval cancelled with the keyboard alone (Shift+Tab from the message
    box to Cancel, Enter): nothing is written."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, web_url)
    snapshot, audit_before = db_snapshot(novaops), audit_rows(novaops)
    bot = _say(browser, TICKET)
    filled = [li.text for li in bot.find_elements(By.CSS_SELECTOR, ".tx .params li.filled")]
    pending = [li.text for li in bot.find_elements(By.CSS_SELECTOR, ".tx .params li.pending")]
    assert any("priority" in f and "P2" in f for f in filled), filled
    assert any("service_id" in p for p in pending) and any("title" in p for p in pending), pending
    _shot(browser, "05-collecting.png")

    browser.find_element(By.ID, "new-thread").click()
    assert not _finished(browser) and len(browser.find_elements(By.CSS_SELECTOR, "#thread-list .thread")) == 1
    card = _confirmation_card(browser)
    box = browser.find_element(By.ID, "message")
    box.click()
    box.send_keys(Keys.SHIFT, Keys.TAB)  # the turn's details toggle
    browser.switch_to.active_element.send_keys(Keys.SHIFT, Keys.TAB)  # Cancel
    focused = browser.switch_to.active_element
    assert focused == card.find_element(By.CSS_SELECTOR, "button.cancel"), focused.get_attribute("outerHTML")
    _shot(browser, "06-cancel-focused.png")
    before = len(_finished(browser))
    focused.send_keys(Keys.ENTER)
    done = _wait_answer(browser, before)
    assert "cancel" in done.text.lower(), done.text
    assert [u.text for u in browser.find_elements(By.CSS_SELECTOR, ".msg.user .text")][-1] == "não"
    _shot(browser, "07-cancelled.png")
    assert expense_status(novaops, EXPENSE) == "pending"
    assert audit_rows(novaops) == audit_before and db_changes(novaops, snapshot) == {}

    browser.find_elements(By.CSS_SELECTOR, "#thread-list .thread")[1].click()  # back to the ticket, from the server's state
    WebDriverWait(browser, 30).until(lambda d: TICKET in d.find_element(By.ID, "turns").text)
    assert [li.text for li in browser.find_elements(By.CSS_SELECTOR, ".tx .params li.pending")] == pending


# ----------------------------------------------------------------------------- HTTP, no browser
def _events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for block in response.text.split("\n\n"):
        lines = [line for line in block.splitlines() if not line.startswith(":")]
        event = next((line[6:].strip() for line in lines if line.startswith("event:")), "")
        data = "\n".join(line[5:].lstrip() for line in lines if line.startswith("data:"))
        if event and data:
            out.append((event, json.loads(data)))
    return out


def test_stream_forwards_synthesis_tokens_then_the_state(web_app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """POST /threads/{id}/stream: progress events, the answer as the model writes it (one chunk
    for a model that does not stream, many for one that does), then a final event with the state;
    the JSON API and the page keep working beside it."""
    from langchain_core.messages import AIMessageChunk
    from langchain_core.outputs import ChatGenerationChunk
    from starlette.testclient import TestClient

    from tools.scripted_model import ScriptedChatModel

    with TestClient(web_app()) as client:
        r = client.post("/threads/s1/stream", json={"text": DOC_QUESTION, "user_id": USER})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _events(r)
        kinds = [e for e, _ in events]
        assert kinds[-1] == "final" and "progress" in kinds
        final = events[-1][1]
        tokens = [d["text"] for e, d in events if e == "token"]
        # the scripted model streams its reply in a few pieces; the final answer is that reply after
        # clean_answer, so it starts with the streamed words
        assert len(tokens) > 1 and final["answer"].split()[0] in tokens[0]
        assert final["status"] == "idle" and "synthesize" in final["trace"]["nodes"]
        docs = [c for c in final["contexts"] if c["backend"] == "docs"]
        assert docs and all("source" in it and "text" in it for it in docs[0]["items"])
        assert final["titles"]["doc-pol-travel"] == "Política de Viagens Corporativas"

        def word_stream(self: Any, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            text = str(self._generate(messages, stop=stop, **kw).generations[0].message.content)
            for i, word in enumerate(text.split(" ")):
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else " " + word))
                if run_manager:
                    run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk

        monkeypatch.setattr(ScriptedChatModel, "_stream", word_stream, raising=False)
        events = _events(client.post("/threads/s2/stream", json={"text": DOC_QUESTION, "user_id": USER}))
        tokens = [d["text"] for e, d in events if e == "token"]
        # the final event carries the answer after clean_answer (the page shows it in place of the
        # stream), which may differ from the raw stream; the heading line is the same
        streamed, final_answer = "".join(tokens), events[-1][1]["answer"]
        assert len(tokens) > 10 and streamed.splitlines()[0] == final_answer.splitlines()[0]

        r = client.post("/threads/s3/turn", json={"text": APPROVE, "user_id": USER})
        assert r.status_code == 200 and r.json()["status"] == "awaiting_confirmation"
        assert r.json()["transaction"]["args"] == {"expense_id": EXPENSE}
        users = client.get("/api/users").json()["users"]
        assert {"id": USER, "name": "Luciana Moreira", "role": "Finance Manager"} in users and len(users) > 50
        page = client.get("/")
        assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
        assert 'src="/static/app.js"' in page.text and "://" not in page.text  # nothing loaded from elsewhere
        for asset in ("app.js", "app.css"):
            assert client.get(f"/static/{asset}").status_code == 200


def test_trusted_header_is_the_user(web_app: Any) -> None:
    """Behind an SSO proxy the header names the user: a body's user_id is ignored, a request
    without the header is refused, and the page gets no directory to pick from."""
    from starlette.testclient import TestClient

    with TestClient(web_app(trusted_user_header="X-Forwarded-User")) as client:
        assert client.get("/api/config").status_code == 401
        assert client.get("/api/config", headers={"X-Forwarded-User": USER}).json()["user"] == USER
        assert client.get("/api/users", headers={"X-Forwarded-User": USER}).status_code == 403
        r = client.post("/threads/h1/turn", json={"text": APPROVE, "user_id": USER})
        assert r.status_code == 401 and "X-Forwarded-User" in r.json()["error"]
        r = client.post("/threads/h1/stream", json={"text": APPROVE}, headers={"X-Forwarded-User": "E\u0415006".encode()})
        assert r.status_code == 401
        # E004 (approval limit 0) may not approve this expense; the header's E006 may: the header wins
        r = client.post("/threads/h1/turn", json={"text": APPROVE, "user_id": "E004"},
                        headers={"X-Forwarded-User": USER})
        assert r.status_code == 200 and r.json()["status"] == "awaiting_confirmation", r.json()


def test_serve_refuses_a_public_bind_without_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`tramita serve`/`web` on a non-loopback address need --trusted-user-header; loopback does not."""
    from tramita.shell import cli
    from tramita.shell.server import UnsafeBind, check_bind

    for host in ("127.0.0.1", "::1", "localhost"):
        check_bind(host)
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        with pytest.raises(UnsafeBind, match="trusted-user-header"):
            check_bind(host)
        check_bind(host, "X-Forwarded-User")
    with pytest.raises(UnsafeBind):
        check_bind("0.0.0.0", "X-User: E001")
    monkeypatch.setenv("TRAMITA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("TRAMITA_LLM", "scripted")
    for command in ("serve", "web"):
        assert cli.main(["--verbose", command, "--host", "0.0.0.0", "--port", "1"]) == 2
        assert "refusing to listen on 0.0.0.0" in capsys.readouterr().out
