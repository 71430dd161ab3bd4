--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Data for Name: runs; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.runs VALUES ('run-01', 'gate_after_pattern', 'awaiting_approval', NULL, NULL, '630973a31c29e4a3', '2026-12-03 09:39:41.503+00', '2026-12-03 09:39:41.512+00', 'final', 2, 2, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.runs VALUES ('run-02', 'gate_before_pattern', 'awaiting_approval', NULL, NULL, '84d7d8fae916fa63', '2026-12-03 09:39:41.514+00', '2026-12-03 09:39:41.515+00', 'draft', 1, 2, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.runs VALUES ('run-03', 'gate_before_pattern', 'failed', NULL, NULL, '84d7d8fae916fa63', '2026-12-03 09:39:41.516+00', '2026-12-03 09:39:41.527+00', 'argue', 1, 2, 0, 'step ''argue'' (iteration 1, agent ''pro'') failed: RuntimeError: pro failed on purpose', NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.runs VALUES ('run-04', 'turn_approval', 'awaiting_approval', NULL, NULL, '0e11f32643ccfb15', '2026-12-03 09:39:41.528+00', '2026-12-03 09:39:41.531+00', 'argue', 0, 1, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.runs VALUES ('run-05', 'turn_input', 'awaiting_input', NULL, NULL, '34741252d0764097', '2026-12-03 09:39:41.533+00', '2026-12-03 09:39:41.537+00', 'argue', 0, 1, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.runs VALUES ('run-06', 'ask', 'awaiting_input', NULL, NULL, '56115b10e8667f25', '2026-12-03 09:39:41.539+00', '2026-12-03 09:39:41.542+00', 'question', 0, 1, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL);


--
-- Data for Name: checkpoints; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.checkpoints VALUES (1, 'run-01', 0, 'argue', 'start', '2026-12-03 09:39:41.503+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (2, 'run-01', 2, 'argue', 'boundary', '2026-12-03 09:39:41.503+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (3, 'run-01', 3, 'argue', 'boundary', '2026-12-03 09:39:41.508+00', NULL, '{"next":0,"in":{"round":1,"spoken":["pro"]}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (4, 'run-01', 0, 'argue', 'boundary', '2026-12-03 09:39:41.51+00', NULL, '{"next":0,"in":{"round":2,"spoken":[]}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (5, 'run-01', 1, 'final', 'boundary', '2026-12-03 09:39:41.511+00', NULL, '{"next":1}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (6, 'run-01', 2, 'final', 'approval', '2026-12-03 09:39:41.512+00', 'approve the output of step ''final''', '{"next":2,"gate":"final"}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (7, 'run-02', 0, 'draft', 'start', '2026-12-03 09:39:41.514+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (8, 'run-02', 1, 'draft', 'approval', '2026-12-03 09:39:41.515+00', 'approve the output of step ''draft''', '{"next":1,"gate":"draft"}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (9, 'run-03', 0, 'draft', 'start', '2026-12-03 09:39:41.516+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (10, 'run-03', 1, 'draft', 'approval', '2026-12-03 09:39:41.517+00', 'approve the output of step ''draft''', '{"next":1,"gate":"draft"}', 'approved', 'alice', '2026-12-03 09:39:41.52+00', NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (11, 'run-03', 2, 'argue', 'boundary', '2026-12-03 09:39:41.524+00', NULL, '{"next":1}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (12, 'run-04', 0, 'argue', 'start', '2026-12-03 09:39:41.528+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (13, 'run-04', 1, 'argue', 'boundary', '2026-12-03 09:39:41.528+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (14, 'run-04', 2, 'argue', 'boundary', '2026-12-03 09:39:41.53+00', NULL, '{"next":0,"in":{"round":1,"spoken":["pro"]}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (15, 'run-04', 2, 'argue', 'approval', '2026-12-03 09:39:41.531+00', 'approve pro''s speech? (argue, round 1, as ''person'')', '{"next":0,"in":{"round":1,"spoken":["pro"]}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (16, 'run-05', 0, 'argue', 'start', '2026-12-03 09:39:41.533+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (17, 'run-05', 1, 'argue', 'boundary', '2026-12-03 09:39:41.533+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (18, 'run-05', 2, 'argue', 'boundary', '2026-12-03 09:39:41.536+00', NULL, '{"next":0,"in":{"round":1,"spoken":["pro"]}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (19, 'run-05', 2, 'argue', 'input', '2026-12-03 09:39:41.537+00', 'your view? (argue, round 1, as ''person'')', '{"next":0,"in":{"round":1,"spoken":["pro"]}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (20, 'run-06', 0, 'question', 'start', '2026-12-03 09:39:41.539+00', NULL, '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
INSERT INTO rp_fixture_v8.checkpoints VALUES (21, 'run-06', 0, 'question', 'input', '2026-12-03 09:39:41.542+00', 'what colour?', '{"next":0}', NULL, NULL, NULL, NULL, NULL, NULL, NULL);


--
-- Data for Name: definitions; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.definitions VALUES ('630973a31c29e4a3', '[{"name":"argue","approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","con"],"rounds":1,"judge":false},{"name":"final","approval":true,"retries":0,"on_orphan":"retry","timeout":null}]');
INSERT INTO rp_fixture_v8.definitions VALUES ('84d7d8fae916fa63', '[{"name":"draft","approval":true,"retries":0,"on_orphan":"retry","timeout":null},{"name":"argue","approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","con"],"rounds":1,"judge":false}]');
INSERT INTO rp_fixture_v8.definitions VALUES ('0e11f32643ccfb15', '[{"name":"argue","approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","person"],"humans":{"person":{"kind":"approval","timeout":null}},"rounds":1,"judge":false}]');
INSERT INTO rp_fixture_v8.definitions VALUES ('34741252d0764097', '[{"name":"argue","approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","person"],"humans":{"person":{"kind":"input","timeout":null}},"rounds":1,"judge":false}]');
INSERT INTO rp_fixture_v8.definitions VALUES ('56115b10e8667f25', '[{"name":"question","approval":false,"retries":0,"on_orphan":"retry","timeout":null}]');


--
-- Data for Name: events; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.events VALUES (1, 'run-01', '2026-12-03 09:39:41.503+00', 'run_started', NULL, NULL, '{"workflow": "gate_after_pattern", "pid": 19530, "host": "vm"}');
INSERT INTO rp_fixture_v8.events VALUES (2, 'run-01', '2026-12-03 09:39:41.503+00', 'step_started', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (3, 'run-01', '2026-12-03 09:39:41.508+00', 'step_completed', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (4, 'run-01', '2026-12-03 09:39:41.508+00', 'step_started', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "con"}');
INSERT INTO rp_fixture_v8.events VALUES (5, 'run-01', '2026-12-03 09:39:41.51+00', 'step_completed', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "con"}');
INSERT INTO rp_fixture_v8.events VALUES (6, 'run-01', '2026-12-03 09:39:41.51+00', 'step_started', 'argue', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (7, 'run-01', '2026-12-03 09:39:41.511+00', 'step_completed', 'argue', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (8, 'run-01', '2026-12-03 09:39:41.511+00', 'step_started', 'final', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (9, 'run-01', '2026-12-03 09:39:41.512+00', 'step_completed', 'final', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (10, 'run-01', '2026-12-03 09:39:41.512+00', 'paused', 'final', NULL, '{"checkpoint_id": 6, "gate": "approval", "reason": "approve the output of step ''final''", "deadline_at": null}');
INSERT INTO rp_fixture_v8.events VALUES (11, 'run-02', '2026-12-03 09:39:41.514+00', 'run_started', NULL, NULL, '{"workflow": "gate_before_pattern", "pid": 19530, "host": "vm"}');
INSERT INTO rp_fixture_v8.events VALUES (12, 'run-02', '2026-12-03 09:39:41.514+00', 'step_started', 'draft', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (13, 'run-02', '2026-12-03 09:39:41.515+00', 'step_completed', 'draft', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (14, 'run-02', '2026-12-03 09:39:41.515+00', 'paused', 'draft', NULL, '{"checkpoint_id": 8, "gate": "approval", "reason": "approve the output of step ''draft''", "deadline_at": null}');
INSERT INTO rp_fixture_v8.events VALUES (15, 'run-03', '2026-12-03 09:39:41.516+00', 'run_started', NULL, NULL, '{"workflow": "gate_before_pattern", "pid": 19530, "host": "vm"}');
INSERT INTO rp_fixture_v8.events VALUES (16, 'run-03', '2026-12-03 09:39:41.516+00', 'step_started', 'draft', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (17, 'run-03', '2026-12-03 09:39:41.517+00', 'step_completed', 'draft', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (18, 'run-03', '2026-12-03 09:39:41.517+00', 'paused', 'draft', NULL, '{"checkpoint_id": 10, "gate": "approval", "reason": "approve the output of step ''draft''", "deadline_at": null}');
INSERT INTO rp_fixture_v8.events VALUES (19, 'run-03', '2026-12-03 09:39:41.52+00', 'approved', 'draft', 'alice', '{"checkpoint_id": 10, "comment": null, "output_edited": false}');
INSERT INTO rp_fixture_v8.events VALUES (20, 'run-03', '2026-12-03 09:39:41.524+00', 'resumed', NULL, NULL, '{"pid": 19530, "host": "vm", "previous_status": "queued", "abandoned": {"seq": 1, "step": "argue"}}');
INSERT INTO rp_fixture_v8.events VALUES (21, 'run-03', '2026-12-03 09:39:41.524+00', 'step_started', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (22, 'run-03', '2026-12-03 09:39:41.527+00', 'step_failed', 'argue', NULL, '{"attempt": 1, "error": "RuntimeError: pro failed on purpose", "will_retry": false, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (23, 'run-03', '2026-12-03 09:39:41.527+00', 'run_failed', 'argue', NULL, '{"error": "RuntimeError: pro failed on purpose", "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (24, 'run-04', '2026-12-03 09:39:41.528+00', 'run_started', NULL, NULL, '{"workflow": "turn_approval", "pid": 19530, "host": "vm"}');
INSERT INTO rp_fixture_v8.events VALUES (25, 'run-04', '2026-12-03 09:39:41.528+00', 'step_started', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (26, 'run-04', '2026-12-03 09:39:41.53+00', 'step_completed', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (27, 'run-04', '2026-12-03 09:39:41.53+00', 'step_started', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "person"}');
INSERT INTO rp_fixture_v8.events VALUES (28, 'run-04', '2026-12-03 09:39:41.531+00', 'paused', 'argue', NULL, '{"checkpoint_id": 15, "gate": "approval", "reason": "approve pro''s speech? (argue, round 1, as ''person'')", "deadline_at": null, "iteration": 1, "agent": "person"}');
INSERT INTO rp_fixture_v8.events VALUES (29, 'run-05', '2026-12-03 09:39:41.533+00', 'run_started', NULL, NULL, '{"workflow": "turn_input", "pid": 19530, "host": "vm"}');
INSERT INTO rp_fixture_v8.events VALUES (30, 'run-05', '2026-12-03 09:39:41.533+00', 'step_started', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (31, 'run-05', '2026-12-03 09:39:41.536+00', 'step_completed', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "pro"}');
INSERT INTO rp_fixture_v8.events VALUES (32, 'run-05', '2026-12-03 09:39:41.536+00', 'step_started', 'argue', NULL, '{"attempt": 1, "iteration": 1, "agent": "person"}');
INSERT INTO rp_fixture_v8.events VALUES (33, 'run-05', '2026-12-03 09:39:41.537+00', 'paused', 'argue', NULL, '{"checkpoint_id": 19, "gate": "input", "reason": "your view? (argue, round 1, as ''person'')", "deadline_at": null, "iteration": 1, "agent": "person"}');
INSERT INTO rp_fixture_v8.events VALUES (34, 'run-06', '2026-12-03 09:39:41.539+00', 'run_started', NULL, NULL, '{"workflow": "ask", "pid": 19530, "host": "vm"}');
INSERT INTO rp_fixture_v8.events VALUES (35, 'run-06', '2026-12-03 09:39:41.539+00', 'step_started', 'question', NULL, '{"attempt": 1}');
INSERT INTO rp_fixture_v8.events VALUES (36, 'run-06', '2026-12-03 09:39:41.542+00', 'paused', 'question', NULL, '{"checkpoint_id": 21, "gate": "input", "reason": "what colour?", "deadline_at": null}');


--
-- Data for Name: listeners; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--



--
-- Data for Name: meta; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.meta VALUES ('app', 'relaypoint');
INSERT INTO rp_fixture_v8.meta VALUES ('schema_version', '8');


--
-- Data for Name: outputs; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.outputs VALUES ('run-01', 2, '{"speech":"pro speaks in round 1"}');
INSERT INTO rp_fixture_v8.outputs VALUES ('run-01', 3, '{"speech":"con speaks in round 1"}');
INSERT INTO rp_fixture_v8.outputs VALUES ('run-01', 0, '{"pro":{"speech":"pro speaks in round 1"},"con":{"speech":"con speaks in round 1"}}');
INSERT INTO rp_fixture_v8.outputs VALUES ('run-01', 1, '{"publish":"THE REAL GATED OUTPUT"}');
INSERT INTO rp_fixture_v8.outputs VALUES ('run-02', 0, '{"draft":"the draft"}');
INSERT INTO rp_fixture_v8.outputs VALUES ('run-03', 0, '{"draft":"the draft"}');
INSERT INTO rp_fixture_v8.outputs VALUES ('run-04', 1, '{"speech":"pro speaks in round 1"}');
INSERT INTO rp_fixture_v8.outputs VALUES ('run-05', 1, '{"speech":"pro speaks in round 1"}');


--
-- Data for Name: run_inputs; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.run_inputs VALUES ('run-01', '{}');
INSERT INTO rp_fixture_v8.run_inputs VALUES ('run-02', '{"fail":true}');
INSERT INTO rp_fixture_v8.run_inputs VALUES ('run-03', '{"fail":true}');
INSERT INTO rp_fixture_v8.run_inputs VALUES ('run-04', '{}');
INSERT INTO rp_fixture_v8.run_inputs VALUES ('run-05', '{}');
INSERT INTO rp_fixture_v8.run_inputs VALUES ('run-06', '{}');


--
-- Data for Name: steps; Type: TABLE DATA; Schema: rp_fixture_v8; Owner: postgres
--

INSERT INTO rp_fixture_v8.steps VALUES ('run-01', 2, 'argue', 1, 'pro', 0, 'completed', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.503+00', '2026-12-03 09:39:41.508+00', 'run-01/argue#1/pro');
INSERT INTO rp_fixture_v8.steps VALUES ('run-01', 3, 'argue', 1, 'con', 0, 'completed', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.508+00', '2026-12-03 09:39:41.51+00', 'run-01/argue#1/con');
INSERT INTO rp_fixture_v8.steps VALUES ('run-06', 0, 'question', 1, NULL, NULL, 'awaiting_input', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.539+00', NULL, 'run-06/question');
INSERT INTO rp_fixture_v8.steps VALUES ('run-01', 0, 'argue', 1, NULL, NULL, 'completed', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","con"],"rounds":1,"judge":false}', NULL, NULL, '2026-12-03 09:39:41.51+00', '2026-12-03 09:39:41.511+00', 'run-01/argue');
INSERT INTO rp_fixture_v8.steps VALUES ('run-01', 1, 'final', 1, NULL, NULL, 'completed', 1, '{"approval":true,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.511+00', '2026-12-03 09:39:41.512+00', 'run-01/final');
INSERT INTO rp_fixture_v8.steps VALUES ('run-02', 1, 'argue', 1, NULL, NULL, 'pending', 0, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","con"],"rounds":1,"judge":false}', NULL, NULL, NULL, NULL, 'run-02/argue');
INSERT INTO rp_fixture_v8.steps VALUES ('run-02', 0, 'draft', 1, NULL, NULL, 'completed', 1, '{"approval":true,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.514+00', '2026-12-03 09:39:41.515+00', 'run-02/draft');
INSERT INTO rp_fixture_v8.steps VALUES ('run-03', 0, 'draft', 1, NULL, NULL, 'completed', 1, '{"approval":true,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.516+00', '2026-12-03 09:39:41.517+00', 'run-03/draft');
INSERT INTO rp_fixture_v8.steps VALUES ('run-03', 1, 'argue', 1, NULL, NULL, 'cancelled', 0, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","con"],"rounds":1,"judge":false}', NULL, NULL, NULL, '2026-12-03 09:39:41.524+00', 'run-03/argue');
INSERT INTO rp_fixture_v8.steps VALUES ('run-03', 2, 'argue', 1, 'pro', 1, 'failed', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', 'RuntimeError: pro failed on purpose', 'Traceback (most recent call last):
  File "/tmp/fx/oldpkg/relaypoint/execution.py", line 209, in drive
    value = spec.fn(views.ctx)
            ^^^^^^^^^^^^^^^^^^
  File "/work/main/tests/data/v4_workflows.py", line 13, in pro
    raise RuntimeError("pro failed on purpose")
RuntimeError: pro failed on purpose
', '2026-12-03 09:39:41.524+00', '2026-12-03 09:39:41.527+00', 'run-03/argue#1/pro');
INSERT INTO rp_fixture_v8.steps VALUES ('run-04', 0, 'argue', 1, NULL, NULL, 'pending', 0, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","person"],"humans":{"person":{"kind":"approval","timeout":null}},"rounds":1,"judge":false}', NULL, NULL, NULL, NULL, 'run-04/argue');
INSERT INTO rp_fixture_v8.steps VALUES ('run-04', 1, 'argue', 1, 'pro', 0, 'completed', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.528+00', '2026-12-03 09:39:41.53+00', 'run-04/argue#1/pro');
INSERT INTO rp_fixture_v8.steps VALUES ('run-04', 2, 'argue', 1, 'person', 0, 'awaiting_approval', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.53+00', NULL, 'run-04/argue#1/person');
INSERT INTO rp_fixture_v8.steps VALUES ('run-05', 0, 'argue', 1, NULL, NULL, 'pending', 0, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null,"pattern":"debate","agents":["pro","person"],"humans":{"person":{"kind":"input","timeout":null}},"rounds":1,"judge":false}', NULL, NULL, NULL, NULL, 'run-05/argue');
INSERT INTO rp_fixture_v8.steps VALUES ('run-05', 1, 'argue', 1, 'pro', 0, 'completed', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.533+00', '2026-12-03 09:39:41.536+00', 'run-05/argue#1/pro');
INSERT INTO rp_fixture_v8.steps VALUES ('run-05', 2, 'argue', 1, 'person', 0, 'awaiting_input', 1, '{"approval":false,"retries":0,"on_orphan":"retry","timeout":null}', NULL, NULL, '2026-12-03 09:39:41.536+00', NULL, 'run-05/argue#1/person');


--
-- Name: checkpoints_checkpoint_id_seq; Type: SEQUENCE SET; Schema: rp_fixture_v8; Owner: postgres
--

SELECT pg_catalog.setval('rp_fixture_v8.checkpoints_checkpoint_id_seq', 21, true);


--
-- Name: events_event_id_seq; Type: SEQUENCE SET; Schema: rp_fixture_v8; Owner: postgres
--

SELECT pg_catalog.setval('rp_fixture_v8.events_event_id_seq', 36, true);


--
-- PostgreSQL database dump complete
--


