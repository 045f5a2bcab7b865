"""The jobs ship the UDF jar Maven builds (jobs/jvm/pom.xml): a missing jar, or one older than a source, stops a
submission with the build command to run; nothing is compiled on the submitting host."""
from __future__ import annotations

import os
import zipfile

import pytest

from jobs.jvm import BUILD_COMMAND, POM, UDF_JAR, JvmBuildError, udf_jar


def test_a_missing_udf_jar_names_the_maven_command_that_builds_it(tmp_path):
    with pytest.raises(JvmBuildError, match="missing: build it with `mvn -q -f jobs/jvm/pom.xml package`"):
        udf_jar(tmp_path / "adserve-udf-0.1.0.jar")


def test_a_udf_jar_older_than_its_sources_must_be_rebuilt(tmp_path):
    jar = tmp_path / "adserve-udf-0.1.0.jar"
    jar.write_bytes(b"")
    os.utime(jar, (0, 0))
    with pytest.raises(JvmBuildError, match=f"older than .*rebuild it with `{BUILD_COMMAND}`"):
        udf_jar(jar)


def test_the_udf_jar_is_the_pom_artifact_and_holds_the_operators_but_no_flink_or_test_classes():
    assert f"<artifactId>{UDF_JAR.name.rsplit('-', 1)[0]}</artifactId>" in POM.read_text()
    assert f"<version>{UDF_JAR.stem.rsplit('-', 1)[1]}</version>" in POM.read_text()
    with zipfile.ZipFile(udf_jar()) as jar:
        classes = [n for n in jar.namelist() if n.endswith(".class")]
    assert "io/adserve/flink/SpendWindows.class" in classes
    assert all(n.startswith("io/adserve/flink/") for n in classes)
    assert not any("GoldenDriver" in n for n in classes)


def test_the_pom_compiles_against_the_flink_version_pyflink_ships():
    import pyflink
    from pathlib import Path

    [dist] = (Path(pyflink.__file__).parent / "lib").glob("flink-dist-*.jar")
    version = dist.stem.removeprefix("flink-dist-")
    assert f"<flink.version>{version}</flink.version>" in POM.read_text()
    assert POM.read_text().count("<scope>provided</scope>") == POM.read_text().count("<dependency>")
