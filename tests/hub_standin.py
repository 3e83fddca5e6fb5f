"""A local HTTP stand-in for the few Hugging Face Hub endpoints grouprl's pushes use.

The real hub cannot be reached from this machine (no internet), so the pushes are tested against
this real HTTP server on 127.0.0.1, driven by the real ``huggingface_hub`` client. It keeps repos
in memory: branches -> list of commits (newest last), each commit a full file snapshot; model and
dataset repos alike (one namespace, the repo's type recorded). Endpoints:
create repo, list refs, list commits, create branch, preupload (every file "regular", so content
travels base64 in the commit), commit (NDJSON).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HubState:
    def __init__(self):
        self.repos: dict[str, dict] = {}  # repo_id -> {"private": bool, "branches": {name: [commit, ...]}}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []

    def new_commit(self, parent: dict | None, files: dict[str, bytes], title: str) -> dict:
        snapshot = dict(parent["files"]) if parent else {}
        snapshot.update(files)
        digest = hashlib.sha1(json.dumps([title, sorted(snapshot), parent and parent["id"]]).encode()).hexdigest()
        return {"id": digest, "title": title, "files": snapshot, "parent": parent and parent["id"]}


class Handler(BaseHTTPRequestHandler):
    state: HubState  # set on the subclass made by serve()

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, code: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _repo(self, repo_id: str):
        repo = self.state.repos.get(repo_id)
        if repo is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
        return repo

    def _resolve(self, repo_id: str, revision: str, filename: str, head: bool) -> None:
        """A file at a revision (branch name or commit id), as ``hf_hub_download`` fetches it."""
        from urllib.parse import unquote

        repo, revision = self._repo(repo_id), unquote(revision)
        if repo is None:
            return
        commits = (
            repo["branches"].get(revision)
            or [c for cs in repo["branches"].values() for c in cs if c["id"] == revision][-1:]
        )
        if not commits:
            self.send_response(404)
            self.send_header("X-Error-Code", "RevisionNotFound")
            self.send_header("Content-Length", "0")
            return self.end_headers()
        commit = commits[-1]
        data = commit["files"].get(filename)
        self.send_response(200 if data is not None else 404)
        self.send_header("X-Repo-Commit", commit["id"])
        if data is None:
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            return self.end_headers()
        self.send_header("ETag", '"' + hashlib.sha1(data).hexdigest() + '"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def do_HEAD(self):  # noqa: N802
        self.state.requests.append(("HEAD", self.path))
        if m := re.fullmatch(r"/(?:models/)?(.+?)/resolve/([^/]+)/(.+)", self.path.split("?")[0]):
            return self._resolve(m[1], m[2], m[3], head=True)
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):  # noqa: N802 - http.server's naming
        self.state.requests.append(("GET", self.path))
        path = self.path.split("?")[0]
        if m := re.fullmatch(r"/(?:models/)?(.+?)/resolve/([^/]+)/(.+)", path):
            return self._resolve(m[1], m[2], m[3], head=False)
        if m := re.fullmatch(r"/api/(?:models|datasets)/(.+)/tree/([^/]+)(?:/(.*))?", path):
            return self._send(404, {"error": "stand-in keeps no folders"})  # e.g. additional_chat_templates
        if m := re.fullmatch(r"/api/(?:models|datasets)/(.+)/refs", path):
            if (repo := self._repo(m[1])) is None:
                return
            branches = [
                {"name": b, "ref": f"refs/heads/{b}", "targetCommit": commits[-1]["id"]}
                for b, commits in repo["branches"].items()
            ]
            return self._send(200, {"branches": branches, "tags": [], "converts": [], "pullRequests": []})
        if m := re.fullmatch(r"/api/(?:models|datasets)/(.+)/commits/([^/]+)", path):
            if (repo := self._repo(m[1])) is None:
                return
            commits = repo["branches"].get(m[2])
            if commits is None:
                return self._send(404, {"error": f"revision {m[2]} not found"})
            return self._send(
                200,
                [
                    {
                        "id": c["id"],
                        "title": c["title"],
                        "message": "",
                        "date": "2026-01-01T00:00:00Z",
                        "authors": [{"user": "grouprl"}],
                    }
                    for c in reversed(commits)
                ],
            )
        self._send(404, {"error": f"stand-in does not serve GET {path}"})

    def do_POST(self):  # noqa: N802
        self.state.requests.append(("POST", self.path))
        path, body = self.path.split("?")[0], self._body()
        with self.state.lock:
            if path == "/api/repos/create":
                payload = json.loads(body)
                repo_id = (
                    f"{payload['organization']}/{payload['name']}"
                    if payload.get("organization")
                    else f"user/{payload['name']}"
                )
                if repo_id in self.state.repos:
                    return self._send(409, {"error": "You already created this model repo", "url": repo_id})
                initial = self.state.new_commit(
                    None, {".gitattributes": b"*.safetensors filter=lfs\n"}, "initial commit"
                )
                self.state.repos[repo_id] = {
                    "private": payload.get("visibility") == "private" or payload.get("private"),
                    "branches": {"main": [initial]},
                    "type": payload.get("type") or "model",
                }
                return self._send(200, {"url": f"http://{self.headers['Host']}/{repo_id}", "name": repo_id})
            if m := re.fullmatch(r"/api/(?:models|datasets)/(.+)/branch/([^/]+)", path):
                if (repo := self._repo(m[1])) is None:
                    return
                start = json.loads(body or b"{}").get("startingPoint")
                if m[2] in repo["branches"]:
                    return self._send(409, {"error": "Reference already exists"})
                every = {c["id"]: c for commits in repo["branches"].values() for c in commits}
                repo["branches"][m[2]] = [every[start]] if start else list(repo["branches"]["main"])
                return self._send(200, {})
            if m := re.fullmatch(r"/api/(?:models|datasets)/(.+)/preupload/([^/]+)", path):
                files = json.loads(body)["files"]
                return self._send(
                    200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
                )
            if m := re.fullmatch(r"/api/(?:models|datasets)/(.+)/commit/([^/]+)", path):
                if (repo := self._repo(m[1])) is None:
                    return
                lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                header = next(x["value"] for x in lines if x["key"] == "header")
                files = {
                    x["value"]["path"]: base64.b64decode(x["value"]["content"]) for x in lines if x["key"] == "file"
                }
                branch = repo["branches"].setdefault(m[2], [])
                commit = self.state.new_commit(branch[-1] if branch else None, files, header["summary"])
                branch.append(commit)
                return self._send(
                    200,
                    {
                        "commitUrl": f"http://{self.headers['Host']}/{m[1]}/commit/{commit['id']}",
                        "commitOid": commit["id"],
                        "success": True,
                    },
                )
        self._send(404, {"error": f"stand-in does not serve POST {path}"})


def serve() -> tuple[ThreadingHTTPServer, HubState]:
    """Start the stand-in on a free port of 127.0.0.1 (a daemon thread); stop it with ``shutdown()``."""
    state = HubState()
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state
