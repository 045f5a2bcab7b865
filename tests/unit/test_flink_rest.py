"""jobs.deploy.FlinkRest: the calls to a cluster's REST API carry the settings' credentials, reach the URL the
settings name (flink.rest_url), and a refused or unreachable API is a DeployError that says which setting to
check. The server here is a plain HTTP server on 127.0.0.1 that records what it receives (the behaviour under
test is the client's); the jobs' own REST calls against a real cluster are in tests/integration."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.endpoints import parse
from jobs import deploy
from jobs.deploy import DeployError, FlinkRest


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str]] = []
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        body = json.dumps({"jobs": [{"jid": "j1", "name": "features", "state": "RUNNING", "start-time": 1,
                                     "duration": 5}]}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server():
    _Recorder.seen, _Recorder.status = [], 200
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_the_settings_url_and_bearer_token_reach_the_api(server):
    endpoints = parse({}, "tools", {"ADSERVE_FLINK_REST_URL": server + "/", "ADSERVE_FLINK_TOKEN": "t0k"})
    jobs = deploy.list_jobs(FlinkRest.of(endpoints.flink))
    assert [(j.job_id, j.name, j.state) for j in jobs] == [("j1", "features", "RUNNING")]
    assert _Recorder.seen == [("GET", "/jobs/overview", "Bearer t0k")]


def test_basic_credentials_and_the_timeout_come_from_the_settings_file(server):
    endpoints = parse({"flink": {"rest_url": server, "username": "ops", "password": "pw", "timeout_s": 3}},
                      "tools", {})
    rest = FlinkRest.of(endpoints.flink)
    assert rest.timeout_s == 3.0
    deploy.list_jobs(rest)
    assert _Recorder.seen == [("GET", "/jobs/overview", "Basic b3BzOnB3")]  # base64 of ops:pw
    assert "pw" not in repr(rest) and "b3BzOnB3" not in repr(rest)


def test_a_bare_url_calls_without_credentials(server):
    deploy.list_jobs(server)
    assert _Recorder.seen == [("GET", "/jobs/overview", "")]


def test_a_refused_call_names_the_credentials_to_check(server):
    _Recorder.status = 401
    with pytest.raises(DeployError, match="HTTP 401.*flink.token"):
        deploy.list_jobs(FlinkRest(server, "Bearer wrong"))


def test_an_unreachable_api_is_a_deploy_error_naming_the_url():
    with pytest.raises(DeployError, match="127.0.0.1:9/jobs/overview"):
        deploy.list_jobs(FlinkRest("http://127.0.0.1:9", timeout_s=2))


@pytest.mark.parametrize("flink, named", [
    ({"rest_url": "https://f", "token": "t", "username": "u", "password": "p"}, "not both"),
    ({"rest_url": "https://f", "username": "u"}, "needs both"),
    ({"rest_url": "http://f", "ca_file": "/ca.pem"}, "only for an https"),
    ({"rest_url": "https://f", "timeout_s": 0}, "above 0"),
    ({"rest_url": "https://f", "timeout_s": "soon"}, "flink.timeout_s"),
])
def test_contradictory_flink_settings_are_refused_naming_them(flink, named):
    with pytest.raises(ValueError, match=named):
        parse({"flink": flink}, "tools", {})
