"""The web dashboard in headless Chromium (Playwright), against a running server.

    dashboard.py <base url> <admin> <password> <artifact directory> <user> <password>

(`<user>` is an ordinary user: built-in role `user`.)

Run by scripts/browser-test, which starts the server. What it does, as a user would:
logs in (once wrongly: the server's message shows), submits a job with the dashboard's
form and watches it appear in the queue and change state, filters, sorts and pages the
queue, opens the job's detail (fields, events), the nodes (what runs where), the
reservation timeline, a report's chart of datapoints fed through the interface, the live
event feed (an event made while it is open appears), VMs and services, and logs out;
then logs in as an ordinary user, who sees none of the administrator's jobs and is told
that events are not theirs to read. Last, a page of another site posts a form to the
service in a browser that holds the administrator's login: refused, and no job made.
Every step leaves a screenshot in the artifact directory; any JavaScript error, console
error or failed request fails the test.
"""

import base64
import datetime
import html
import http.server
import json
import pathlib
import sys
import threading
import time
import urllib.parse
import urllib.request

from playwright.sync_api import expect, sync_playwright

BASE, USER, PASSWORD, ARTIFACTS, ORDINARY, ORDINARY_PASSWORD = sys.argv[1:7]
ARTIFACTS = pathlib.Path(ARTIFACTS)
ARTIFACTS.mkdir(parents=True, exist_ok=True)
DASHBOARD = BASE + "/dashboard/"
TIMEOUT_MS = 30_000
# A job name that would run a script if the page ever rendered data as HTML.
HOSTILE = '<img src=x onerror="document.title=1">'


def rest(method, path, body=None):
    """A call of the interface with the administrator's login (the test's own setup)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + "/rest/" + path, data=data, method=method)
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request.add_header("Authorization", "Basic " + login)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


def wire(moment):
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def setup():
    """What the pages will show: jobs to page through, one running job, a reservation
    and a report with an hour of samples."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    for i in range(11):
        name = HOSTILE if i == 0 else f"batch-{i}"
        rest("POST", "jobs?api-version=2", {"commandFile": "/bin/true", "customName": name, "duration": 10})
        if i == 0:
            time.sleep(1.1)  # the oldest by a second: off the first page of the README's picture (docs/dashboard.png)
    time.sleep(1.1)  # the newest by a second (ties of a sort keep the creation order)
    long = rest("POST", "jobs?api-version=2",
                {"commandFile": "/bin/sleep", "commandLineArguments": "120", "customName": "long-run",
                 "duration": 300})["name"]
    # A job stopped at its wall time: its page says why (its message).
    stopped = rest("POST", "jobs?api-version=2",
                   {"commandFile": "/bin/sleep", "commandLineArguments": "60", "customName": "over-time",
                    "duration": 1})["name"]
    deadline = time.time() + 60
    while rest("GET", f"jobs/{stopped}")["state"] != "VACATED":
        assert time.time() < deadline, f"{stopped} was not stopped at its wall time"
        time.sleep(0.2)
    rest("POST", "reservations", {
        "startDate": wire(now + datetime.timedelta(minutes=20)), "duration": 3600,
        "requirements": {"taskCount": 1}, "comments": "maintenance window",
    })
    rest("POST", "reservations", {
        "startDate": wire(now + datetime.timedelta(minutes=90)), "duration": 1800,
        "requirements": {"taskCount": 1}, "comments": "benchmark",
    })
    rest("POST", "reports", {"name": "cluster-load", "description": "Samples posted by the browser test",
                             "datapointDuration": 60, "reportSize": 120})
    samples = []
    for minute in range(60, 0, -1):
        at = now - datetime.timedelta(minutes=minute)
        samples.append({"timestamp": wire(at),
                        "data": {"cpu": 40 + 30 * ((minute * 7) % 11) / 10, "memory": 20 + minute / 2}})
    rest("POST", "reports/cluster-load/samples", samples)
    return long, stopped


def forgery_is_refused(browser, problems):
    """A page of another site (served at `localhost`, another site than `127.0.0.1`)
    posts a form to the service, in a browser that holds the administrator's Basic
    login and sends it to the service with every request: the post is refused, and no
    job is made."""
    service = urllib.parse.urlsplit(BASE)
    target = BASE + "/rest/jobs?api-version=2"
    name = '{"commandFile":"/bin/true","customName":"forged","x":"'
    page_html = (f'<form method="POST" enctype="text/plain" action="{html.escape(target)}">'
                 f'<input name="{html.escape(name)}" value=\'"}}\'></form>'
                 '<script>document.forms[0].submit()</script>').encode()

    class Attacker(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page_html)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"{service.scheme}://{service.netloc}"
    context = browser.new_context(http_credentials={
        "username": USER, "password": PASSWORD, "origin": origin})
    page = context.new_page()
    try:
        with page.expect_response(lambda r: r.url == target) as answered:
            page.goto(f"http://localhost:{server.server_port}/")
        answer = answered.value
        if answer.status != 403:
            problems.append(f"a form of another site was answered {answer.status}: {answer.text()}")
        page.screenshot(path=str(ARTIFACTS / "13-forged-form-refused.png"))
    finally:
        context.close()
        server.shutdown()
    forged = rest("GET", "jobs?api-version=2&query=" + urllib.parse.quote('{"customName":"forged"}'))
    if forged["totalCount"] != 0:
        problems.append(f"a form of another site made a job: {forged}")


def main():
    long_job, stopped_job = setup()
    problems = []
    tolerate = {"errors": False}

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(TIMEOUT_MS)

        def on_console(message):
            if message.type == "error" and not tolerate["errors"]:
                problems.append(f"console error: {message.text}")

        def on_response(response):
            if response.status >= 400 and not tolerate["errors"]:
                problems.append(f"{response.status} {response.request.method} {response.url} "
                                f"(on {page.url})")

        page.on("console", on_console)
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("response", on_response)
        asked = []
        page.on("request", lambda request: asked.append(request.url))

        def shot(name, height=None):
            clip = {"x": 0, "y": 0, "width": 1280, "height": height} if height else None
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), clip=clip)

        def no_banner():
            expect(page.locator("#banner")).to_be_hidden()

        # The page, through the redirect from /dashboard, with its security headers.
        answer = page.goto(BASE + "/dashboard")
        assert page.url == DASHBOARD, page.url
        headers = answer.headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"], headers
        assert headers["x-content-type-options"] == "nosniff", headers
        expect(page.locator("#login")).to_be_visible()
        shot("01-login")

        # A wrong login shows the server's message (its 401 is expected here).
        tolerate["errors"] = True
        page.fill("#login-user", USER)
        page.fill("#login-password", "not the password")
        page.click("#login-form button[type=submit]")
        expect(page.locator("#login-error")).to_contain_text("authenticated")
        tolerate["errors"] = False
        shot("02-login-refused")

        page.fill("#login-password", PASSWORD)
        page.click("#login-form button[type=submit]")
        expect(page.locator("#queue-table")).to_be_visible()
        expect(page.locator("#user")).to_have_text(USER)
        storage = page.evaluate("() => [localStorage.length, sessionStorage.getItem('drover.user')]")
        assert storage == [0, USER], storage

        # Submit through the dashboard's form; the job appears and changes state.
        page.click("#submit-panel summary")
        page.fill("#submit-command", "/bin/sleep")
        page.fill("#submit-args", "4")
        page.fill("#submit-name", "from-the-browser")
        # A duration, so that it may run before the reservations begin.
        page.fill("#submit-duration", "60")
        page.click("#submit-form button[type=submit]")
        expect(page.locator("#submit-result")).to_contain_text("Submitted")
        job = page.get_attribute("#submit-result", "data-job")
        row = page.locator(f'#queue-table tr[data-id="{job}"]')
        expect(row).to_be_visible()
        state = row.locator('td[data-col="state"]')
        first = state.inner_text()
        assert first != "COMPLETED", first
        expect(row.locator('td[data-col="name"]')).to_have_text("from-the-browser")
        shot("03-queue-submitted")
        seen = [first]
        deadline = time.time() + 30
        while time.time() < deadline and seen[-1] != "COMPLETED":
            now = state.inner_text()
            if now != seen[-1]:
                seen.append(now)
            time.sleep(0.2)
        assert seen[-1] == "COMPLETED", seen
        assert len(seen) >= 2, seen
        print(f"job {job} went through {' -> '.join(seen)}")
        shot("04-queue-completed")

        # Filter, sort and page through the interface's list parameters.
        page.select_option("#filter-state", "RUNNING")
        expect(page.locator("#queue-table tbody tr")).to_have_count(1)
        expect(page.locator(f'#queue-table tr[data-id="{long_job}"]')).to_be_visible()
        page.select_option("#filter-state", "")
        page.select_option("#page-size", "10")
        expect(page.locator("#page-info")).to_contain_text("1–10 of 14")
        expect(page.locator("#queue-table tbody tr")).to_have_count(10)
        page.click("#page-next")
        expect(page.locator("#page-info")).to_contain_text("11–14 of 14")
        page.click("#page-prev")
        page.click("#queue-table th:has-text('User')")
        page.click("#queue-table th:has-text('Job')")
        expect(page.locator("#queue-table th:has-text('Job')")).to_contain_text("▲")
        page.select_option("#page-size", "20")
        expect(page.locator("#queue-table tbody tr")).to_have_count(14)
        # Data is text, never markup.
        expect(page.locator(f'#queue-table td[data-col="name"]:text-is({json.dumps(HOSTILE)})')).to_have_count(1)
        assert page.locator("#view img").count() == 0
        assert page.title() == "Drover", page.title()
        no_banner()
        shot("05-queue")

        # The job's detail: fields and its events.
        page.click(f'#queue-table tr[data-id="{job}"] a')
        expect(page.locator("#job-id")).to_have_text(job)
        expect(page.locator('#job-fields dd[data-field="state"]')).to_have_text("COMPLETED")
        expect(page.locator('#job-fields dd[data-field="commandFile"]')).to_have_text("/bin/sleep")
        for kind in ("jobsubmit", "jobstart", "jobend"):
            expect(page.locator(f'#job-events-table td[data-col="type"]:text-is("{kind}")')).to_have_count(1)
        no_banner()
        shot("06-job-detail")

        # A job that did not end well says why on its page.
        page.goto(DASHBOARD + f"#/job/{stopped_job}")
        expect(page.locator("#job-id")).to_have_text(stopped_job)
        expect(page.locator("#job-messages")).to_contain_text("exceeded its wall time")
        no_banner()

        # A malformed address is no crash.
        tolerate["errors"] = True  # its 404 is expected
        page.goto(DASHBOARD + "#/job/%E0")
        expect(page.locator("#job-id")).to_have_text("%E0")
        expect(page.locator("#banner")).to_contain_text("%E0")
        page.wait_for_timeout(2500)
        tolerate["errors"] = False
        # Asked once, not every 2 s.
        missing = [url for url in asked if url.endswith("/rest/jobs/%25E0")]
        assert len(missing) == 1, missing

        # Nodes, with the long job where it runs.
        page.click('nav a[data-view="nodes"]')
        expect(page.locator("#nodes-table tbody tr").first).to_be_visible()
        expect(page.locator(f'#nodes-table td[data-col="jobs"] a:text-is("{long_job}")')).to_be_visible()
        no_banner()
        shot("07-nodes")

        # The reservation timeline, with the job that runs.
        page.click('nav a[data-view="reservations"]')
        expect(page.locator("#gantt-svg rect.gantt-bar")).to_have_count(2)
        expect(page.locator(f'#gantt-svg rect.gantt-job[data-id="{long_job}"]')).to_have_count(1)
        expect(page.locator("#reservations-table tbody tr")).to_have_count(2)
        no_banner()
        shot("08-reservations")

        # A report's chart of its datapoints.
        page.click('nav a[data-view="reports"]')
        page.click('#reports-table a:text-is("cluster-load")')
        expect(page.locator("#report-svg path.series")).to_have_count(2)
        points = page.locator("#report-svg circle.point").count()
        assert points >= 100, points
        expect(page.locator("#report-legend")).to_contain_text("cpu")
        no_banner()
        shot("09-report-chart")

        # The live event feed: an event made now appears without a reload.
        page.click('nav a[data-view="events"]')
        expect(page.locator("#stream-status")).to_contain_text("live")
        fresh = rest("POST", "jobs?api-version=2", {"commandFile": "/bin/true", "customName": "live", "duration": 10})["name"]
        expect(page.locator(f'#events-table tr.fresh:has(a:text-is("{fresh}")) td[data-col="type"]:text-is("jobsubmit")')).to_be_visible()
        no_banner()
        shot("10-events")

        # VMs and services (none here: the lists answer empty).
        page.click('nav a[data-view="vms"]')
        expect(page.locator("#vms-table")).to_be_visible()
        no_banner()
        page.click('nav a[data-view="services"]')
        expect(page.locator("#services-table")).to_be_visible()
        no_banner()
        shot("11-services")

        # Back to the queue for the picture in the README and docs/dashboard.md, then log out.
        page.click('nav a[data-view="queue"]')
        page.click("#queue-table th:has-text('Submitted')")
        page.click("#queue-table th:has-text('Submitted')")
        expect(page.locator("#queue-table th:has-text('Submitted')")).to_contain_text("▼")
        page.select_option("#page-size", "10")
        expect(page.locator(f'#queue-table tr[data-id="{long_job}"] td[data-col="state"]')).to_have_text("RUNNING")
        page.wait_for_timeout(300)
        shot("dashboard", height=560)  # the picture of the README and docs/dashboard.md (docs/dashboard.png)
        page.click("#logout")
        expect(page.locator("#login")).to_be_visible()
        assert page.evaluate("() => sessionStorage.length") == 0

        # An ordinary user sees what their roles read, and nothing more.
        page.fill("#login-user", ORDINARY)
        page.fill("#login-password", ORDINARY_PASSWORD)
        page.click("#login-form button[type=submit]")
        expect(page.locator("#user")).to_have_text(ORDINARY)
        expect(page.locator("#queue-table")).to_contain_text("No jobs match.")
        expect(page.locator("#page-info")).to_have_text("0–0 of 0")
        tolerate["errors"] = True  # the 403s below are the point
        page.click('nav a[data-view="events"]')
        expect(page.locator("#banner")).to_contain_text("events:read")
        expect(page.locator("#stream-status")).to_have_text("not connected")
        shot("12-ordinary-user-events")
        page.click('nav a[data-view="queue"]')
        expect(page.locator("#banner")).to_be_hidden()
        tolerate["errors"] = False
        page.click("#logout")

        forgery_is_refused(browser, problems)
        browser.close()

    rest("PUT", f"jobs/{long_job}/cancel", {})
    if problems:
        print("problems:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print(f"dashboard browser test passed; screenshots in {ARTIFACTS}")


if __name__ == "__main__":
    main()
