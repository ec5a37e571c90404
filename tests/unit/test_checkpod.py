"""The checker pod: name, labels, annotations, env injection, restartPolicy, owner."""
from kuberhealthy.records.checkpod import RUN_KEY_ANNOTATION, TOKEN_VOLUME, Claimed, build_pod
from kuberhealthy.records.checkspec import CheckSpec, validate_pod_spec
from testbed.fakes.readouts import pod_env_value


def check(**spec: object) -> CheckSpec:
    base = {"runInterval": "1m", "timeout": "2m", "podSpec": {"restartPolicy": "Always", "containers": [
        {"name": "main", "image": "kh-sim/ok", "env": [{"name": "KH_RUN_UUID", "value": "user-set"},
                                                      {"name": "MINE", "value": "1"}]},
        {"name": "side", "image": "busybox"}]}}
    base.update(spec)
    return CheckSpec.of({"metadata": {"namespace": "ns", "name": "DNS-Check"}, "spec": base})


def test_the_pod_is_named_after_the_check_and_the_unix_second_in_lowercase() -> None:
    pod = build_pod(check(), "u-1", 1700000000.7, "http://kh/externalCheckStatus")
    assert pod["metadata"]["name"] == "dns-check-1700000000"
    assert pod["metadata"]["namespace"] == "ns"


def test_labels_annotations_and_restart_policy_follow_the_contract() -> None:
    pod = build_pod(check(extraLabels={"team": "a", "app": "mine"}, extraAnnotations={"x": "y"}), "u-1", 1e9,
                    "http://kh/externalCheckStatus")
    assert pod["metadata"]["labels"] == {"team": "a", "app": "kuberhealthy-check", "kuberhealthy-run-id": "u-1",
                                         "kuberhealthy-check-name": "DNS-Check"}
    assert pod["metadata"]["annotations"] == {"x": "y", "comcast.github.io/check-name": "DNS-Check"}
    assert pod["spec"]["restartPolicy"] == "Never"


def test_every_container_gets_the_four_env_vars_replacing_user_values() -> None:
    pod = build_pod(check(), "u-1", 1000.0, "http://kh/externalCheckStatus")
    for c in pod["spec"]["containers"]:
        env = {e["name"]: e for e in c["env"]}
        assert env["KH_REPORTING_URL"]["value"] == "http://kh/externalCheckStatus"
        assert env["KH_RUN_UUID"]["value"] == "u-1"
        assert env["KH_CHECK_RUN_DEADLINE"]["value"] == str(1000 + 120)
        assert env["KH_POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        assert [e["name"] for e in c["env"]].count("KH_RUN_UUID") == 1
    assert pod_env_value(pod, "MINE") == "1"
    assert pod_env_value(pod, "KH_RUN_UUID") == "u-1"


def test_an_owner_reference_is_added_only_when_given() -> None:
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "kh-0", "uid": "abc"}
    assert build_pod(check(), "u", 1.0, "http://x", owner)["metadata"]["ownerReferences"] == [owner]
    assert "ownerReferences" not in build_pod(check(), "u", 1.0, "http://x")["metadata"]


def test_a_bad_run_interval_falls_back_to_the_default() -> None:
    assert check(runInterval="often").run_interval == 600
    assert check(timeout="").timeout == 300


def test_specs_compare_equal_only_when_nothing_that_matters_changed() -> None:
    assert check() == check()
    assert check() != check(runInterval="2m")
    assert check() != check(extraLabels={"a": "b"})


def test_pod_specs_without_containers_or_images_are_refused() -> None:
    assert validate_pod_spec({}) == "podSpec has no containers"
    assert validate_pod_spec({"containers": []}) == "podSpec has no containers"
    assert "has no image" in str(validate_pod_spec({"containers": [{"name": "c", "image": " "}]}))
    assert validate_pod_spec({"containers": [{"name": "c", "image": "x"}]}) is None


def test_the_run_deadline_counts_from_the_run_start_when_given() -> None:
    pod = build_pod(check(), "u-1", 1000.0, "http://kh/externalCheckStatus", deadline_unix=1050.0)
    assert pod_env_value(pod, "KH_CHECK_RUN_DEADLINE") == "1050"
    assert pod["metadata"]["name"] == "dns-check-1000"


def test_init_containers_get_the_injected_env_too() -> None:
    c = CheckSpec.of({"metadata": {"namespace": "ns", "name": "c"}, "spec": {"podSpec": {
        "initContainers": [{"name": "init", "image": "busybox"}], "containers": [{"name": "m", "image": "x"}]}}})
    pod = build_pod(c, "u-9", 1.0, "http://kh/externalCheckStatus")
    env = {e["name"]: e for e in pod["spec"]["initContainers"][0]["env"]}
    assert env["KH_RUN_UUID"]["value"] == "u-9" and set(env) >= {"KH_REPORTING_URL", "KH_CHECK_RUN_DEADLINE",
                                                                 "KH_POD_NAMESPACE"}


def test_every_container_gets_the_report_token_mounted_read_only_and_its_path_in_env() -> None:
    spec = {"automountServiceAccountToken": False, "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "main", "image": "kh-sim/ok",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]}
    pod = build_pod(check(podSpec=spec), "u-1", 1000.0, "http://kh/externalCheckStatus")
    [token] = [v for v in pod["spec"]["volumes"] if v["name"] == TOKEN_VOLUME]
    assert token["projected"]["sources"] == [{"serviceAccountToken": {
        "audience": "kuberhealthy", "expirationSeconds": 600, "path": "token"}}]
    assert {v["name"] for v in pod["spec"]["volumes"]} == {"data", TOKEN_VOLUME}
    assert pod["spec"]["automountServiceAccountToken"] is False  # the API token stays off; ours is not one
    for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
        [mount] = [m for m in c["volumeMounts"] if m["name"] == TOKEN_VOLUME]
        assert mount["readOnly"] is True
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["KH_REPORT_TOKEN_FILE"] == mount["mountPath"] + "/token"


def test_a_user_volume_or_env_of_the_same_name_is_replaced_not_doubled() -> None:
    spec = {"containers": [{"name": "main", "image": "x", "env": [{"name": "KH_REPORT_TOKEN_FILE", "value": "/mine"}],
                            "volumeMounts": [{"name": TOKEN_VOLUME, "mountPath": "/elsewhere"}]}],
            "volumes": [{"name": TOKEN_VOLUME, "emptyDir": {}}]}
    pod = build_pod(check(podSpec=spec), "u-1", 1000.0, "http://kh/externalCheckStatus")
    assert [v["name"] for v in pod["spec"]["volumes"]].count(TOKEN_VOLUME) == 1
    [c] = pod["spec"]["containers"]
    assert [m["name"] for m in c["volumeMounts"]].count(TOKEN_VOLUME) == 1
    assert pod_env_value(pod, "KH_REPORT_TOKEN_FILE") != "/mine"


def test_the_run_key_is_an_annotation_of_the_pod_only_when_given_and_never_the_authors() -> None:
    mine = check(extraAnnotations={RUN_KEY_ANNOTATION: "forged"})
    assert RUN_KEY_ANNOTATION not in build_pod(mine, "u", 1.0, "http://x")["metadata"]["annotations"]
    keyed = build_pod(mine, "u", 1.0, "http://x", claimed=Claimed(run_key="k"))
    assert keyed["metadata"]["annotations"][RUN_KEY_ANNOTATION] == "k"
