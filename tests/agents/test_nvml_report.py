"""Node configuration and how it shapes the report: split count, scaling, exclusion, model names."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agents.nvml.config import CardSelector, ConfigError, NodeConfig, load_config, with_flags
from agents.nvml.inventory import CardReading, NodeReading, PairReading
from agents.nvml.report import build_report, card_type, pair_score, unmatched_exclusions

A100 = "NVIDIA A100-SXM4-80GB"


def node_of_three() -> NodeReading:
    """Three cards: 0-1 on NVLink (4 links), 1-2 on one PCIe switch, 0-2 across CPUs."""
    return NodeReading(
        cards=(
            CardReading(0, "GPU-a", A100, 81920, 0),
            CardReading(1, "GPU-b", A100, 81920, 0),
            CardReading(2, "GPU-c", A100, 81920, 1, problems=("critical XID 79",)),
        ),
        pairs=(
            PairReading("GPU-a", "GPU-b", 4),
            PairReading("GPU-a", "GPU-c", 0, "across-cpus"),
            PairReading("GPU-b", "GPU-c", 0, "single-switch"),
        ),
    )


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("Tesla T4", "NVIDIA-Tesla T4"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100 80GB HBM3"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
        ("Tesla V100-SXM2-16GB", "NVIDIA-Tesla V100-SXM2-16GB"),
        ("NVIDIA GeForce RTX 4090", "NVIDIA-GeForce RTX 4090"),
        ("", "NVIDIA"),
    ],
)
def test_card_type_is_nvidia_dash_model_without_doubling_the_vendor(model, expected):
    assert card_type(model) == expected


@pytest.mark.parametrize(
    ("path", "score"),
    [
        ("same-board", 60),
        ("single-switch", 50),
        ("multiple-switches", 40),
        ("host-bridge", 30),
        ("same-cpu", 20),
        ("across-cpus", 10),
        (None, 0),
    ],
)
def test_pcie_path_scores_follow_spec_6_8(path, score):
    assert pair_score(PairReading("x", "y", 0, path)) == score


def test_nvlink_beats_the_pcie_path():
    assert pair_score(PairReading("x", "y", 3, "across-cpus")) == 300


def test_scaling_split_count_labels_and_mode_shape_every_card():
    config = NodeConfig(
        split_count=4,
        memory_scaling=Decimal("0.7"),
        core_scaling=Decimal("0.29"),
        labels={"gpu": "on"},
        annotations={"team": "ml"},
        mode="hami-core",
    )

    body = build_report("n1", node_of_three(), config)

    common = {"type": "NVIDIA-A100-SXM4-80GB", "slots": 4, "memory": 57344, "cores": 29, "mode": "hami-core"}
    assert body == {
        "node": "n1",
        "labels": {"gpu": "on"},
        "annotations": {"team": "ml"},
        "devices": [
            {
                "uuid": "GPU-a",
                "index": 0,
                **common,
                "numa": 0,
                "health": True,
                "links": {"GPU-b": 400, "GPU-c": 10},
            },
            {
                "uuid": "GPU-b",
                "index": 1,
                **common,
                "numa": 0,
                "health": True,
                "links": {"GPU-a": 400, "GPU-c": 50},
            },
            {
                "uuid": "GPU-c",
                "index": 2,
                **common,
                "numa": 1,
                "health": False,
                "links": {"GPU-a": 10, "GPU-b": 50},
            },
        ],
    }


@pytest.mark.parametrize(
    ("memory", "scaling", "expected"),
    [
        (15360, "1.0", 15360),
        (15360, "0.9", 13824),
        (81559, "0.5", 40779),
        (16384, "1.5", 24576),
        (100, "0.29", 29),
    ],
)
def test_reported_memory_is_the_floor_of_total_times_scaling(memory, scaling, expected):
    reading = NodeReading(cards=(CardReading(0, "GPU-a", "Tesla T4", memory, 0),))
    config = with_flags(NodeConfig(), memory_scaling=scaling)

    assert build_report("n", reading, config)["devices"][0]["memory"] == expected


@pytest.mark.parametrize("selector", ["GPU-b", "1"])
def test_an_excluded_card_vanishes_from_devices_and_from_the_others_links(selector):
    config = with_flags(NodeConfig(), exclude=[selector])

    body = build_report("n", node_of_three(), config)

    assert [card["uuid"] for card in body["devices"]] == ["GPU-a", "GPU-c"]
    assert body["devices"][0]["links"] == {"GPU-c": 10}
    assert body["devices"][1]["links"] == {"GPU-a": 10}


def test_exclusions_naming_no_card_are_found():
    config = with_flags(NodeConfig(), exclude=["GPU-a,7", "GPU-zz"])

    assert unmatched_exclusions(node_of_three(), config) == ["7", "GPU-zz"]


def test_config_file_yaml(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text(
        "split_count: 4\nmemory_scaling: 0.9\ncore_scaling: 1.5\nexclude: [GPU-b, 2]\n"
        "labels: {gpu: 'on'}\nmode: hami-core\n"
    )

    config = load_config(path)

    assert config == NodeConfig(
        split_count=4,
        memory_scaling=Decimal("0.9"),
        core_scaling=Decimal("1.5"),
        exclude=(CardSelector(uuid="GPU-b"), CardSelector(index=2)),
        labels={"gpu": "on"},
        mode="hami-core",
    )


def test_config_file_json_and_flags_win_over_it(tmp_path):
    path = tmp_path / "node.json"
    path.write_text('{"split_count": 4, "memory_scaling": 0.5, "exclude": ["GPU-a"]}')

    config = with_flags(load_config(path), split_count="8", exclude=["3"])

    assert (config.split_count, config.memory_scaling) == (8, Decimal("0.5"))
    assert config.exclude == (CardSelector(uuid="GPU-a"), CardSelector(index=3))


def test_empty_config_file_means_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")

    assert load_config(path) == NodeConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("split_count: 0", "split_count: expected a whole number >= 1, got 0"),
        ("split_count: true", "split_count: expected a whole number >= 1"),
        ("memory_scaling: -1", "memory_scaling: expected a positive finite number, got -1"),
        ("core_scaling: many", "core_scaling: expected a positive number, got 'many'"),
        ("core_scaling: .inf", "core_scaling: expected a positive finite number"),
        ("exclude: [1.5]", "exclude[0]: expected a card UUID or index, got 1.5"),
        ("exclude: [-2]", "exclude[0]: a card index cannot be negative"),
        ("labels: [a]", "labels: expected a mapping of strings"),
        ("splitcount: 4", "unknown key 'splitcount'"),
        ("- 1", "expected a mapping of settings"),
        ("split_count: [", "not valid YAML/JSON"),
    ],
)
def test_bad_config_names_the_file_and_field(tmp_path, text, message):
    path = tmp_path / "node.yaml"
    path.write_text(text)

    with pytest.raises(ConfigError) as raised:
        load_config(path)

    assert str(raised.value).startswith(f"{path}: ")
    assert message in str(raised.value)


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"split_count": "x"}, "--split-count: expected a whole number >= 1"),
        ({"memory_scaling": "0"}, "--memory-scaling: expected a positive finite number"),
        ({"core_scaling": "nan"}, "--core-scaling: expected a positive finite number"),
        ({"exclude": [","]}, "--exclude: expected a card UUID or index"),
    ],
)
def test_bad_flags_name_the_flag(flags, message):
    with pytest.raises(ConfigError, match=message):
        with_flags(NodeConfig(), **flags)
