//! Job lists that scan (#32 item 1): the same answers as the reference semantics over
//! every field clients sort and filter by, and a time budget that keeps one costly list
//! from holding anyone else up.

use drover_domain::dates::WireDates;
use drover_query::ListQuery;
use drover_query::filter::Filter;
use drover_query::paging::Paging;
use drover_query::sort::Sort;
use drover_testkit::{Auth, TestServer, scratch_dir, script, submit_v2, wait_state_v2};
use serde_json::{Value, json};

fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

/// Jobs with ties and missing values in every field the tests sort by: held ones,
/// completed ones (start and completion dates, codes) and cancelled ones, over two
/// seconds. Answers their names in submission order.
fn varied_jobs(server: &TestServer, count: usize) -> Vec<String> {
    let work = scratch_dir();
    let quick = script(work.path(), "quick.sh", "exit 0");
    let failing = script(work.path(), "fail.sh", "exit 3");
    let mut names = Vec::new();
    let mut finished = Vec::new();
    for i in 0..count {
        let mut body = json!({
            "commandFile": if i % 7 == 0 { &failing } else { &quick },
            "initialWorkingDirectory": work.path(),
            "priorities": {"user": (i % 4) as i64},
        });
        if i % 3 != 0 {
            body["customName"] = json!(format!("c{}", i % 5));
        }
        if i % 2 == 0 {
            body["commandLineArguments"] = json!(format!("-n {}", i % 6));
        }
        if i % 5 == 2 {
            body["dates"] = json!({
                "earliestRequestedStartDate": format!("2026-01-0{} 00:00:00 UTC", 1 + i % 4),
                "deadlineDate": format!("2031-01-0{} 00:00:00 UTC", 1 + i % 3),
            });
        }
        if i % 3 == 1 {
            body["description"] = json!(format!("d{}", i % 4));
            body["jobGroup"] = json!(format!("g{}", i % 2));
            body["submitHost"] = json!(format!("h{}", i % 5));
        }
        if i % 4 != 1 {
            body["credentials"] = json!({"account": format!("a{}", i % 3),
                "qosRequested": if i % 2 == 0 { "high" } else { "low" }});
        }
        let runs = i % 5 == 0 || i % 7 == 0;
        if i % 4 == 0 {
            body["flags"] = if i % 8 == 0 {
                json!(["RESTARTABLE"])
            } else {
                json!(["RESTARTABLE", "PREEMPTEE"])
            };
        }
        if !runs && i % 4 == 3 {
            body["requirements"] = json!({"taskCount": 1 + i % 3, "architecture": "x86_64",
                "tasksPerNode": 1 + i % 3 % 2});
        }
        if !runs {
            body["holds"] = json!(["User"]);
            if i % 3 == 2 {
                body["standardOutputFilePath"] =
                    json!(format!("{}/out{}", work.path().display(), i % 4));
                body["emailNotifyAddresses"] = json!([format!("u{}@example.org", i % 3)]);
                body["partitionAccessList"] = json!(["default"]);
            }
            if i % 4 == 2 {
                body["environmentVariables"] = json!({"SITE": format!("s{}", i % 3), "A": "1"});
                body["variables"] = json!({"v": format!("{}", i % 5)});
            }
        }
        let name = submit_v2(server, body);
        if !runs && i % 5 == 3 {
            // Messages: a list of objects, judged by rendering that member alone.
            let messages: Vec<Value> = (0..1 + i % 2)
                .map(|k| json!({"message": format!("m{}", (i + k) % 3)}))
                .collect();
            let reply = server.send_json(
                "PUT",
                &format!("/rest/jobs/{name}?api-version=2"),
                &json!({ "messages": messages }),
            );
            assert_eq!(reply.status, 200, "{}", reply.body);
        }
        if !runs && i % 4 == 1 {
            // More kinds of hold (the hold index has a set per kind).
            let holds = if i % 8 == 1 {
                json!(["System"])
            } else {
                json!(["Batch", "System"])
            };
            let reply = server.send_json(
                "PUT",
                &format!("/rest/jobs/{name}/hold?api-version=2"),
                &json!({ "holds": holds }),
            );
            assert_eq!(reply.status, 200, "{}", reply.body);
        }
        if runs {
            finished.push(name.clone());
        } else if i % 6 == 1 {
            let cancelled = server.call("DELETE", &format!("/rest/jobs/{name}"), Auth::Admin, None);
            assert_eq!(cancelled.status, 200, "{}", cancelled.body);
        }
        names.push(name);
        if i == count / 2 {
            // Two seconds of submissions: date ties and date order both matter.
            std::thread::sleep(std::time::Duration::from_millis(1100));
        }
    }
    for name in &finished {
        wait_state_v2(server, name, "Completed");
    }
    names
}

/// Checks the answer to one list against `ListQuery::run` over every job of the
/// listing, rendered whole (the reference semantics).
fn check(server: &TestServer, version: u32, listing: &str, query: &str, sort: &str, page: Paging) {
    // Fields that do not change between two requests (durations do, but not those of
    // jobs that ended).
    let fields = if version == 2 && listing == "/complete" {
        concat!(
            "name,customName,states,credentials,dates,priorities,queueStatus,completionCode,holdReason,commandFile,commandLineArgs,initialWorkingDirectory,submitHost,description,jobGroup,arrayIndex,arrayMasterName,cancelCount,preemptCount,flags,requirements,isActive,startCount,duration,",
            "durationActive,durationQueued,durationSuspended,durationRemaining,memorySecondsDedicated,processorSecondsDedicated,cpuTime"
        )
    } else if version == 2 {
        concat!(
            "name,customName,states,credentials,dates,priorities,queueStatus,completionCode,holdReason,commandFile,commandLineArgs,initialWorkingDirectory,submitHost,description,jobGroup,arrayIndex,arrayMasterName,cancelCount,preemptCount,flags,requirements,isActive,startCount,duration,",
            "holds,holdDate,bypassCount,deferCount,migrateCount,minimumPreemptTime,memorySecondsUtilized,cpuTime,processorSecondsUtilized,epilogScript,prologScript,resourceFailPolicy,resourceManagerExtension,vmUsagePolicy,standardErrorFilePath,standardOutputFilePath,emailNotifyAddresses,emailNotifyTypes,partitionAccessList,partitionAccessListRequested,nodesRequestedPolicy,systemJobAction,systemJobType,targetedJobAction,targetedJobName,schedName,processorSecondsLimit,messages,blocks,environmentVariables,variables,environmentRequested"
        )
    } else {
        "id,name,user,account,group,qos,qosRequested,queue,state,queueStatus,submitDate,startDate,completionDate,earliestStartDate,earliestStartDateRequested,latestCompletedDateRequested,userPriority,startPriority,runPriority,systemPriority,completionCode,commandFile,commandLineArguments,initialWorkingDirectory,submitHost,startCount,durationRequested,messages,hosts,holds"
    };
    agrees_with_reference(server, version, listing, fields, query, sort, page);
}

/// Asks for one list and checks the answer against `ListQuery::run` over every job of
/// the listing, rendered whole with `fields`.
pub(crate) fn agrees_with_reference(
    server: &TestServer,
    version: u32,
    listing: &str,
    fields: &str,
    query: &str,
    sort: &str,
    page: Paging,
) {
    let mut path = format!(
        "/rest/jobs{listing}?api-version={version}&fields={fields}&query={}&offset={}",
        encode(query),
        page.offset
    );
    if !sort.is_empty() {
        path += &format!("&sort={}", encode(sort));
    }
    if let Some(max) = page.max {
        path += &format!("&max={max}");
    }
    let answer = server.get(&path);
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    let answer = answer.json();
    let everything = server
        .get(&format!(
            "/rest/jobs{listing}?api-version={version}&fields={fields}"
        ))
        .json();
    let documents = everything["results"].as_array().unwrap().clone();
    let reference = ListQuery {
        filter: Filter::parse_str(query, &WireDates::utc()).unwrap(),
        sort: if sort.is_empty() {
            Sort::default()
        } else {
            Sort::parse_str(sort).unwrap()
        },
        paging: page,
    }
    .run(&documents);
    assert_eq!(answer["totalCount"], reference.total, "{path}");
    let key = if version == 2 { "name" } else { "id" };
    let ids = |docs: Vec<&Value>| {
        docs.iter()
            .map(|d| d[key].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let got: Vec<&Value> = answer["results"].as_array().unwrap().iter().collect();
    assert_eq!(ids(got.clone()), ids(reference.items.clone()), "{path}");
    assert!(got == reference.items, "{path}");
}

fn page(offset: usize, max: Option<usize>) -> Paging {
    Paging { offset, max }
}

/// Sorted and filtered lists over many fields, with offsets, ties and missing values,
/// answer what the reference answers, whether judged from an index, on the few fields
/// a query names, or on the whole rendering.
#[test]
fn scanned_lists_agree_with_the_reference_over_many_fields() {
    let server = TestServer::start();
    let names = varied_jobs(&server, 40);
    let one = &names[7];
    let by_name = format!(r#"{{"name":"{one}"}}"#);
    let by_names = format!(r#"{{"name":{{"$in":["{one}","{}","nope"]}}}}"#, names[2]);
    let by_id = format!(r#"{{"id":"{one}"}}"#);
    let v2: Vec<(&str, &str, &str, Paging)> = vec![
        (
            "",
            r#"{"states.state":"Completed"}"#,
            r#"{"name":-1}"#,
            page(1, Some(3)),
        ),
        ("", "{}", r#"{"name":-1}"#, page(3, Some(7))),
        ("", "{}", r#"{"customName":1}"#, page(5, Some(10))),
        ("", "{}", r#"{"customName":-1}"#, page(0, None)),
        (
            "",
            "{}",
            r#"{"priorities.user":-1,"customName":1}"#,
            page(2, Some(9)),
        ),
        (
            "",
            r#"{"priorities.user":{"$gte":2}}"#,
            r#"{"credentials.account":1}"#,
            page(0, Some(50)),
        ),
        ("", r#"{"customName":"c2"}"#, "", page(0, None)),
        (
            "",
            r#"{"customName":{"$in":["c1","c3"]}}"#,
            r#"{"priorities.user":1}"#,
            page(1, Some(4)),
        ),
        (
            "",
            r#"{"customName":{"$type":10}}"#,
            r#"{"dates.submitDate":-1}"#,
            page(0, Some(5)),
        ),
        (
            "",
            r#"{"queueStatus":"blocked"}"#,
            r#"{"dates.submitDate":-1}"#,
            page(2, Some(6)),
        ),
        ("", r#"{"queueStatus":"completed"}"#, "", page(0, None)),
        ("", &by_name, "", page(0, None)),
        ("", &by_names, r#"{"name":1}"#, page(0, None)),
        (
            "",
            r#"{"$or":[{"customName":"c1"},{"credentials.account":{"$exists":false}}]}"#,
            r#"{"credentials.qos":-1}"#,
            page(1, Some(8)),
        ),
        ("", "{}", r#"{"dates.completedDate":-1}"#, page(0, Some(12))),
        (
            "",
            "{}",
            r#"{"dates.startDate":1,"name":-1}"#,
            page(4, Some(10)),
        ),
        ("", "{}", r#"{"completionCode":1}"#, page(0, Some(15))),
        (
            "",
            r#"{"completionCode":{"$ne":null}}"#,
            r#"{"completionCode":-1}"#,
            page(0, None),
        ),
        (
            "",
            "{}",
            r#"{"credentials.user":1,"isActive":-1}"#,
            page(10, Some(10)),
        ),
        ("", "{}", r#"{"flags":1}"#, page(0, Some(5))),
        (
            "",
            r#"{"dates.lastUpdatedDate":{"$type":"string"}}"#,
            r#"{"credentials":1}"#,
            page(3, Some(5)),
        ),
        // Paths the narrow rendering does not know: the members they name judge.
        (
            "",
            r#"{"requirements.resourcesPerTask.memory.dedicated":-1}"#,
            r#"{"requirements":1,"customName":-1}"#,
            page(2, Some(7)),
        ),
        (
            "",
            r#"{"messages":{"$exists":true}}"#,
            r#"{"blocks":-1}"#,
            page(0, Some(9)),
        ),
        // A member rendered alone, read through its lists and objects.
        (
            "",
            r#"{"messages.message":{"$in":["m1","m2"]}}"#,
            r#"{"messages":-1,"name":1}"#,
            page(1, Some(6)),
        ),
        (
            "",
            r#"{"messages.0.author":{"$exists":true}}"#,
            r#"{"messages.createdDate":1,"messages.1.message":-1}"#,
            page(0, None),
        ),
        // One path the fields know and one they do not, through the same member: the
        // member is rendered whole for both.
        (
            "",
            r#"{"requirements.0.taskCount":{"$gte":1},"requirements.0.nodes":{"$exists":false}}"#,
            r#"{"requirements.taskCount":-1}"#,
            page(0, Some(8)),
        ),
        (
            "",
            r#"{"dates.nosuch":{"$exists":false}}"#,
            r#"{"dates":1,"dates.submitDate":-1}"#,
            page(2, Some(8)),
        ),
        // Elements of lists of strings, and a member no job has.
        (
            "",
            r#"{"flags.0":"RESTARTABLE"}"#,
            r#"{"flags.1":-1,"holds.0":1}"#,
            page(0, None),
        ),
        (
            "",
            r#"{"nosuch":{"$exists":false},"nosuch.deeper":null}"#,
            r#"{"nosuch":1,"name":-1}"#,
            page(0, Some(7)),
        ),
        ("", r#"{"nosuch":{"$exists":true}}"#, "", page(0, None)),
        ("", "{}", r#"{"name":1}"#, page(100, Some(5))),
        ("", "{}", r#"{"name":1}"#, page(3, Some(0))),
        ("/active", "{}", r#"{"customName":1}"#, page(1, Some(6))),
        (
            "/active",
            r#"{"credentials.account":"a1"}"#,
            r#"{"priorities.user":-1}"#,
            page(0, None),
        ),
        (
            "/complete",
            "{}",
            r#"{"dates.startDate":1}"#,
            page(0, Some(5)),
        ),
        (
            "/complete",
            r#"{"states.state":"Removed"}"#,
            r#"{"name":-1}"#,
            page(0, None),
        ),
        // Holds, from their index: any kind in the list, `$in` a union, a spelling of
        // version 1 or another case none, a whole list judged by the evaluator.
        (
            "",
            r#"{"holds":"User"}"#,
            r#"{"dates":1,"name":-1}"#,
            page(1, Some(7)),
        ),
        ("", r#"{"holds":"System"}"#, "", page(0, None)),
        (
            "",
            r#"{"holds":{"$in":["Batch","Defer"]},"customName":{"$ne":"c1"}}"#,
            r#"{"name":1}"#,
            page(0, None),
        ),
        ("", r#"{"holds":"USER"}"#, "", page(0, None)),
        ("", r#"{"holds":"user"}"#, "", page(0, None)),
        (
            "",
            r#"{"holds":["Batch","System"]}"#,
            r#"{"name":-1}"#,
            page(0, None),
        ),
        (
            "/active",
            r#"{"holds":{"$in":["System","nope"]}}"#,
            "",
            page(0, None),
        ),
    ];
    for (listing, query, sort, paging) in v2 {
        check(&server, 2, listing, query, sort, paging);
    }
    let v1: Vec<(&str, &str, &str, Paging)> = vec![
        ("", "{}", r#"{"name":1}"#, page(2, Some(6))),
        ("", "{}", r#"{"userPriority":-1}"#, page(0, Some(11))),
        (
            "",
            r#"{"queueStatus":"BLOCKED"}"#,
            r#"{"id":-1}"#,
            page(1, Some(5)),
        ),
        ("", &by_id, "", page(0, None)),
        (
            "",
            r#"{"state":"COMPLETED"}"#,
            r#"{"completionDate":-1}"#,
            page(0, None),
        ),
        ("", "{}", r#"{"startPriority":1,"id":-1}"#, page(5, Some(5))),
        ("", r#"{"name":"c4"}"#, r#"{"account":-1}"#, page(0, None)),
        (
            "",
            r#"{"messages":{"$exists":true},"nosuch":{"$exists":false}}"#,
            r#"{"messages":1,"hosts":-1}"#,
            page(1, Some(6)),
        ),
        (
            "/active",
            r#"{"qos":"low"}"#,
            r#"{"startDate":1}"#,
            page(0, Some(4)),
        ),
        ("", r#"{"holds":"SYSTEM"}"#, r#"{"id":-1}"#, page(0, None)),
        (
            "",
            r#"{"holds":{"$in":["USER","BATCH"]}}"#,
            "",
            page(2, Some(5)),
        ),
        ("", r#"{"holds":"System"}"#, "", page(0, None)),
    ];
    for (listing, query, sort, paging) in v1 {
        check(&server, 1, listing, query, sort, paging);
    }
    // Every path the narrow rendering knows, as a sort and as a filter: its value must be
    // the whole rendering's.
    let known = [
        (
            2,
            "name customName credentials.account credentials.user credentials.group credentials.jobClass credentials.qos credentials.qosRequested states.state queueStatus isActive priorities.run priorities.start priorities.system priorities.user startCount completionCode commandFile commandLineArgs initialWorkingDirectory submitHost description jobGroup arrayIndex arrayMasterName cancelCount preemptCount duration dates.submitDate dates.createdDate dates.startDate dates.dispatchedDate dates.completedDate dates.terminationDate dates.lastUpdatedDate dates.deadlineDate dates.earliestRequestedStartDate dates.earliestStartDate dates.eligibleDate dates.lastCanceledDate dates.lastChargedDate dates.lastPreemptedDate holdReason flags requirements.taskCount requirements.0.taskCount requirements.tasksPerNode requirements.0.nodeCount requirements.nodeCount requirements.architecture requirements.image requirements.reservation requirements.index \
             holds holdDate bypassCount deferCount migrateCount minimumPreemptTime memorySecondsUtilized cpuTime processorSecondsUtilized epilogScript prologScript resourceFailPolicy resourceManagerExtension vmUsagePolicy standardErrorFilePath standardOutputFilePath emailNotifyAddresses emailNotifyTypes partitionAccessList partitionAccessListRequested nodesRequestedPolicy systemJobAction systemJobType targetedJobAction targetedJobName schedName processorSecondsLimit \
             states.stateExpected states.stateLastUpdatedDate states.subState credentials dates priorities states \
             environmentVariables environmentVariables.SITE environmentVariables.NOPE variables variables.v environmentRequested \
             messages messages.message messages.0.author",
        ),
        (
            1,
            "id name account user group qos qosRequested queue queueStatus state startPriority runPriority systemPriority userPriority startCount completionCode commandFile commandLineArguments initialWorkingDirectory submitHost durationRequested submitDate startDate completionDate earliestStartDate earliestStartDateRequested latestCompletedDateRequested \
             messages messages.message messages.index",
        ),
    ];
    // A whole object judged narrow equals its rendering: every member is there.
    for one in [&names[7], &names[8], &names[10]] {
        let job = server
            .get(&format!("/rest/jobs/{one}?api-version=2"))
            .json();
        for object in ["credentials", "dates", "priorities", "states"] {
            let query = json!({ object: job[object] }).to_string();
            check(&server, 2, "", &query, "", page(0, None));
            let query = json!({ object: {"$in": [job[object]]} }).to_string();
            check(&server, 2, "", &query, r#"{"name":-1}"#, page(0, Some(5)));
        }
    }
    // The durations and usage of jobs that ended (those of others change by the second).
    for path in "durationActive durationQueued durationSuspended durationRemaining memorySecondsDedicated processorSecondsDedicated cpuTime".split(' ') {
        let sort = format!(r#"{{"{path}":-1}}"#);
        check(&server, 2, "/complete", "{}", &sort, page(1, Some(10)));
        let query = format!(r#"{{"{path}":{{"$gte":0}}}}"#);
        check(&server, 2, "/complete", &query, &sort, page(0, Some(10)));
    }
    for (version, paths) in known {
        for path in paths.split_whitespace() {
            let sort = format!(r#"{{"{path}":-1}}"#);
            check(&server, version, "", "{}", &sort, page(1, Some(10)));
            let query = format!(r#"{{"{path}":{{"$type":10}}}}"#);
            check(&server, version, "", &query, &sort, page(0, Some(10)));
            let query = format!(r#"{{"{path}":{{"$exists":true,"$ne":"PREEMPTEE"}}}}"#);
            check(&server, version, "", &query, &sort, page(2, Some(10)));
        }
    }
}

/// More jobs than one chunk of the book's scan, so that the scan's selection of the
/// page, its chunks and its runs judged side by side (merged into one page) are
/// exercised, not only its first pass; and a filter the indexes cannot answer, sorted
/// by submission date (the book's order, same-second ties included).
#[test]
fn scans_over_several_chunks_agree_with_the_reference() {
    let server = TestServer::start();
    for i in 0..2600 {
        let mut body = json!({"commandFile": "/bin/true", "initialWorkingDirectory": "/tmp",
            "holds": ["User"], "priorities": {"user": (i % 3) as i64}});
        if i % 13 == 5 {
            // A text that is a date sorts as one.
            body["customName"] = json!(format!("2026-0{}-01 00:00:00 UTC", 1 + i % 3));
        } else if i % 16 != 0 {
            body["customName"] = json!(format!("n{}", i % 11));
        }
        if i % 9 == 4 {
            body["requirements"] = json!({"taskCount": 1 + i % 2, "architecture": "x86_64"});
        }
        submit_v2(&server, body);
    }
    for (query, sort, paging) in [
        ("{}", r#"{"name":-1}"#, page(0, Some(50))),
        ("{}", r#"{"customName":1}"#, page(1990, Some(40))),
        (
            r#"{"priorities.user":{"$gte":1}}"#,
            r#"{"customName":-1,"priorities.user":1}"#,
            page(700, Some(50)),
        ),
        (r#"{"customName":{"$ne":"n3"}}"#, "", page(2400, None)),
        (
            r#"{"priorities.user":{"$gte":1}}"#,
            r#"{"dates.submitDate":-1}"#,
            page(120, Some(50)),
        ),
        (
            r#"{"customName":{"$in":["n1","n2"]},"priorities.user":{"$ne":2}}"#,
            r#"{"dates.submitDate":1}"#,
            page(10, Some(30)),
        ),
        (
            r#"{"priorities.user":0}"#,
            r#"{"dates.submitDate":-1}"#,
            page(0, None),
        ),
        // Whole objects the narrow fields know member by member.
        (
            r#"{"flags":{"$exists":true},"customName":{"$ne":"n4"}}"#,
            r#"{"flags":-1,"dates":1,"name":-1}"#,
            page(30, Some(25)),
        ),
        // Every job matches, so past the first selection (1,024 of a part's 1,300) each
        // is compared with the page's worst kept so far (the row's quicker comparison):
        // whole objects of dates and of numbers, texts against a text and against a
        // date, and numbers where the page's worst is not the best.
        ("{}", r#"{"dates":1,"name":-1}"#, page(100, Some(50))),
        ("{}", r#"{"dates":-1}"#, page(0, Some(50))),
        (
            "{}",
            r#"{"priorities":-1,"customName":1}"#,
            page(40, Some(50)),
        ),
        (
            "{}",
            r#"{"requirements":1,"customName":-1}"#,
            page(0, Some(30)),
        ),
        ("{}", r#"{"customName":-1,"name":1}"#, page(60, Some(20))),
        // Dates sort before other texts: the page's worst is a text that is a date (a
        // first key that ties, as a sort on the indexed custom name alone walks its
        // index).
        (
            r#"{"customName":{"$type":2}}"#,
            r#"{"commandFile":1,"customName":1,"name":-1}"#,
            page(0, Some(50)),
        ),
        (
            "{}",
            r#"{"commandFile":1,"priorities.user":-1,"name":1}"#,
            page(400, Some(50)),
        ),
        // Members the narrow fields do not know (each rendered alone, under the book's
        // lock given up between jobs), and whole objects they know.
        (
            r#"{"messages":{"$exists":true},"customName":{"$ne":"n4"}}"#,
            r#"{"requirements":-1,"priorities":1,"name":-1}"#,
            page(1030, Some(25)),
        ),
    ] {
        check(&server, 2, "", query, sort, paging);
    }
}

/// A list that would scan past its budget is answered 503 with `Retry-After` and the
/// reason, while lists an index answers, and everything else, are answered as usual;
/// an ordinary user's query, however phrased, lists only that user's jobs.
#[test]
fn a_costly_list_is_stopped_at_its_budget_and_lists_only_what_its_user_may_see() {
    let server = TestServer::builder()
        .config(|c| c.list_budget_ms = 1)
        .start();
    for i in 0..3000 {
        submit_v2(
            &server,
            json!({"commandFile": "/bin/true", "initialWorkingDirectory": "/tmp",
                   "holds": ["User"], "customName": format!("x{}", i % 9)}),
        );
    }
    let costly = format!(
        "/rest/jobs?api-version=2&query={}&sort={}&max=50",
        encode(r#"{"states.state":"Hold"}"#),
        encode(r#"{"dates.eligibleDate":-1}"#)
    );
    let answer = server.get(&costly);
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert!(
        answer
            .headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("retry-after") && v == "1"),
        "{:?}",
        answer.headers
    );
    assert!(
        answer.messages().contains("time budget") && answer.messages().contains("narrow"),
        "{}",
        answer.body
    );
    // What an index answers never scans, budget or not.
    let indexed = server.get(&format!(
        "/rest/jobs?api-version=2&max=5&query={}",
        encode(r#"{"customName":"x4","states.state":"Hold"}"#)
    ));
    assert_eq!(indexed.status, 200, "{}", indexed.body);
    assert_eq!(indexed.json()["totalCount"], 3000 / 9);

    // Costly lists looping in the background hold no one else up.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let status = server.get(&costly).status;
                    assert!(status == 503 || status == 200, "{status}");
                }
            });
        }
        for _ in 0..20 {
            assert_eq!(server.get("/rest/diag/about").status, 200);
            let held = drover_testkit::submit_as(
                &server,
                Auth::Admin,
                &json!({"commandFile": "/bin/true", "initialWorkingDirectory": "/tmp", "holds": ["User"]}),
            );
            assert_eq!(held.status, 201, "{}", held.body);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });

    // The ordinary user sees none of the administrator's jobs, whatever the query says,
    // nor learns what their members hold by asking for them.
    let secret = submit_v2(
        &server,
        json!({"commandFile": "/bin/true", "initialWorkingDirectory": "/tmp", "holds": ["User"],
               "environmentVariables": {"SECRET": "s3"}, "variables": {"v": "x"}}),
    );
    let noted = server.send_json(
        "PUT",
        &format!("/rest/jobs/{secret}?api-version=2"),
        &json!({"messages": [{"message": "secret note"}]}),
    );
    assert_eq!(noted.status, 200, "{}", noted.body);
    for query in [
        r#"{"environmentVariables.SECRET":"s3"}"#,
        // A member rendered alone to be judged (a list of objects).
        r#"{"messages.message":"secret note"}"#,
        r#"{"messages.0":{"$exists":true}}"#,
        r#"{"variables.v":{"$exists":true}}"#,
        r#"{"environmentVariables":{"$ne":{}}}"#,
        "{}",
        r#"{"credentials.user":"admin"}"#,
        r#"{"$or":[{"credentials.user":"admin"},{"customName":"x1"}]}"#,
        r#"{"customName":"x1"}"#,
        r#"{"queueStatus":"blocked"}"#,
    ] {
        for sort in ["", r#"{"name":-1}"#] {
            let mut path = format!("/rest/jobs?api-version=2&query={}", encode(query));
            if !sort.is_empty() {
                path += &format!("&sort={}", encode(sort));
            }
            let answer = server.get_as(Auth::User, &path);
            assert!(
                answer.status == 200 || answer.status == 503,
                "{path}: {}",
                answer.body
            );
            if answer.status == 200 {
                assert_eq!(answer.json()["totalCount"], 0, "{path}: {}", answer.body);
            }
        }
    }
}

/// A list whose filter an index answers and whose sort it does not takes its candidates
/// from the index, then judges them one by one under later holds of the book's lock: a
/// job that left the state in between (released, here, while lists loop on the held
/// jobs newest first, the very jobs being released, by state and by hold) is never
/// shown.
#[test]
fn a_scanned_list_never_shows_a_job_that_left_the_indexed_state() {
    let server = TestServer::start();
    let names: Vec<String> = (0..1500)
        .map(|_| {
            submit_v2(
                &server,
                json!({"commandFile": "/bin/true", "initialWorkingDirectory": "/tmp",
                       "holds": ["User"]}),
            )
        })
        .collect();
    // By the state index and by the hold index.
    let lists_by = |query: &str| {
        format!(
            "/rest/jobs?api-version=2&fields=name,states,holds&max=20&query={}&sort={}",
            encode(query),
            encode(r#"{"name":-1}"#)
        )
    };
    let held = [
        lists_by(r#"{"states.state":"Hold"}"#),
        lists_by(r#"{"holds":"User"}"#),
    ];
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let releasing = AtomicBool::new(true);
    let lists = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            // Newest first: each released job is on the page the lists are judging.
            let mut newest_first = names.clone();
            newest_first.sort_by(|a, b| b.cmp(a));
            for (released_so_far, name) in newest_first.iter().take(400).enumerate() {
                // Pace the releases by the lists (a slow machine answers few lists while
                // 400 releases go by): every 20 releases wait for one more list to end,
                // so the lists overlap releases throughout.
                if released_so_far % 20 == 0 {
                    let seen = lists.load(Ordering::Relaxed);
                    let waited = std::time::Instant::now();
                    while lists.load(Ordering::Relaxed) == seen {
                        // The lists stopped (a failed assertion there): end, not hang.
                        if waited.elapsed() > std::time::Duration::from_secs(60) {
                            releasing.store(false, Ordering::Relaxed);
                            panic!("no list ended in 60 s");
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                let released =
                    server.send("PUT", &format!("/rest/jobs/{name}/unhold"), Auth::Admin);
                assert_eq!(released.status, 200, "{}", released.body);
            }
            releasing.store(false, Ordering::Relaxed);
        });
        while releasing.load(Ordering::Relaxed) {
            let answer = server.get(&held[lists.load(Ordering::Relaxed) % 2]);
            assert_eq!(answer.status, 200, "{}", answer.body);
            for job in answer.json()["results"].as_array().unwrap() {
                assert_eq!(job["states"]["state"], "Hold", "{job}");
                assert_eq!(job["holds"], json!(["User"]), "{job}");
            }
            lists.fetch_add(1, Ordering::Relaxed);
        }
    });
    let lists = lists.into_inner();
    assert!(
        lists >= 20,
        "only {lists} lists ran while jobs were released"
    );
}
