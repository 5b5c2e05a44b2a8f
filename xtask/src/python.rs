//! The Python package's checks: `cargo xtask python`, and the last steps of
//! `cargo xtask test-all`.
//!
//! 1. A virtual environment, `target/python/venv`, made with `$PYTHON` (else
//!    `python3`) `-m venv` and filled from PyPI with the pinned versions of
//!    `python/requirements-dev.txt`. A stamp in it records that file and the
//!    interpreter; when either changes, the environment is made anew,
//!    otherwise it is reused as it is (no network).
//! 2. The package built by maturin from `pyproject.toml` (a debug build, with
//!    the bindings crate's `test-envs` feature, so that the tests can build
//!    the workspace's test envs) into a wheel under `target/python/wheels`,
//!    and the wheel installed into the environment (not editable: the tests
//!    import what a user would install). Measured on two cores, this is as
//!    fast as `pip install --no-build-isolation .` and shows cargo's output.
//!    The build shares the workspace's target directory, so on a fresh clone
//!    it reuses what `cargo test` built (about 20 s instead of 80 s); the
//!    price is that PyO3's build script sees other variables here (maturin
//!    sets `PYO3_PYTHON`) than under `cargo clippy` and `cargo doc`, so each
//!    side recompiles PyO3 after the other ran (about 10 s in all).
//! 3. `ruff check` and `ruff format --check` of `python/`, `mypy` (strict, on
//!    `python/rlpool`, as `pyproject.toml` says), the examples of the
//!    installed package's docstrings (`pytest --doctest-modules --pyargs
//!    rlpool`), and `pytest` (`python/tests`, each test under
//!    pytest-timeout, so that a hang fails).
//!
//! Nothing is written to the source tree: no bytecode
//! (`PYTHONDONTWRITEBYTECODE`), no pytest cache (`-p no:cacheprovider`), and
//! the ruff and mypy caches live under `target/python`.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{root, step};

/// The bindings crate's feature that registers the workspace's test envs.
const TEST_FEATURES: &str = "test-envs";

/// The stamp file inside the environment: what it was made from.
const STAMP: &str = "rlpool-requirements.stamp";

/// A virtual environment of pinned requirements, made under `target/` and
/// reused while its requirements file and the interpreter stay the same.
pub(crate) struct Venv {
    /// Where everything of this environment goes (`target/python`).
    home: PathBuf,
    /// Its requirements file, relative to the workspace root.
    requirements: &'static str,
    /// Whether pip writes bytecode at install (worth it for large packages
    /// imported by every worker process: torch).
    compile: bool,
}

impl Venv {
    /// `target/python/venv`, from `python/requirements-dev.txt`: what
    /// `cargo xtask python` and `test-all` use.
    pub(crate) fn dev() -> Venv {
        Venv {
            home: root().join("target").join("python"),
            requirements: "python/requirements-dev.txt",
            compile: false,
        }
    }

    /// `target/torchrl/venv`, from `python/requirements-torchrl.txt`: what
    /// `cargo xtask test-torchrl` uses (torch, tensordict, torchrl).
    pub(crate) fn torchrl() -> Venv {
        Venv {
            home: root().join("target").join("torchrl"),
            requirements: "python/requirements-torchrl.txt",
            compile: true,
        }
    }

    /// `target/ray/venv`, from `python/requirements-ray.txt`: what
    /// `cargo xtask test-ray` uses (Ray).
    pub(crate) fn ray() -> Venv {
        Venv {
            home: root().join("target").join("ray"),
            requirements: "python/requirements-ray.txt",
            compile: false,
        }
    }

    /// The virtual environment's directory.
    fn dir(&self) -> PathBuf {
        self.home.join("venv")
    }

    /// A program of the virtual environment (`python`, `maturin`, ...).
    pub(crate) fn bin(&self, name: &str) -> PathBuf {
        self.dir().join("bin").join(name)
    }

    /// `python -m pytest -p no:cacheprovider` in the environment
    /// ([`Venv::command`]): the start of every pytest run here.
    pub(crate) fn pytest(&self) -> Command {
        let mut command = self.command(self.bin("python"));
        command.args(["-m", "pytest", "-p", "no:cacheprovider"]);
        command
    }

    /// A command run from the workspace root with the environment's tools
    /// first on the path, no bytecode written, and nothing inherited that
    /// would make Python import the package from anywhere but the
    /// environment.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(program);
        let bin = self.dir().join("bin");
        let mut path = OsString::from(bin.as_os_str());
        if let Some(old) = env::var_os("PATH") {
            path.push(":");
            path.push(old);
        }
        command
            .current_dir(root())
            .env("PATH", path)
            .env("VIRTUAL_ENV", self.dir())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env_remove("PYTHONPATH")
            .env_remove("PYTHONHOME")
            .env_remove("CONDA_PREFIX");
        command
    }

    /// What the environment is made from: the requirements and the
    /// interpreter.
    fn wanted_stamp(&self, requirements: &str) -> Result<String, String> {
        let python = base_python();
        let output = Command::new(&python)
            .args([
                "-c",
                "import sys; print(sys.executable); print(sys.version.replace(chr(10), ' '))",
            ])
            .output()
            .map_err(|e| {
                format!(
                    "could not run {} (set $PYTHON to a Python 3.11 or later): {e}",
                    python.to_string_lossy()
                )
            })?;
        if !output.status.success() {
            return Err(format!(
                "{} -c 'import sys; ...' failed ({}): {}",
                python.to_string_lossy(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(format!(
            "# interpreter\n{}# {}\n{requirements}",
            String::from_utf8_lossy(&output.stdout),
            self.requirements
        ))
    }

    /// Makes the environment from its requirements unless the stamp says
    /// it is made from the same file and interpreter.
    pub(crate) fn ensure(&self) -> Result<(), String> {
        let venv = self.dir();
        let req_path = root().join(self.requirements);
        let requirements =
            fs::read_to_string(&req_path).map_err(|e| format!("{}: {e}", req_path.display()))?;
        let wanted = self.wanted_stamp(&requirements)?;
        let stamp = venv.join(STAMP);
        if self.bin("python").exists()
            && fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted)
        {
            println!(
                "xtask: == python environment: reused {} (made from {})",
                venv.display(),
                self.requirements
            );
            return Ok(());
        }
        if venv.exists() {
            fs::remove_dir_all(&venv).map_err(|e| format!("{}: {e}", venv.display()))?;
        }
        fs::create_dir_all(&self.home).map_err(|e| format!("{}: {e}", self.home.display()))?;

        let mut make = Command::new(base_python());
        make.current_dir(root()).arg("-m").arg("venv").arg(&venv);
        step(&format!("python -m venv {}", venv.display()), make).map_err(|e| {
            format!("{e}\n(a Debian system Python needs `apt-get install python3-venv`)")
        })?;

        let mut fill = self.command(self.bin("python"));
        fill.args(["-m", "pip", "install"]);
        if !self.compile {
            fill.arg("--no-compile");
        }
        fill.arg("-r").arg(&req_path);
        step(&format!("pip install -r {}", self.requirements), fill)?;

        // Written last: an interrupted install is redone at the next run.
        fs::write(&stamp, wanted).map_err(|e| format!("{}: {e}", stamp.display()))
    }

    /// Builds the wheel with maturin (this environment's) and installs it.
    pub(crate) fn build_and_install(&self) -> Result<(), String> {
        let wheels = self.home.join("wheels");
        if wheels.exists() {
            fs::remove_dir_all(&wheels).map_err(|e| format!("{}: {e}", wheels.display()))?;
        }
        let mut build = self.command(self.bin("maturin"));
        build
            .args(["build", "--profile", "dev", "--features", TEST_FEATURES])
            .arg("--interpreter")
            .arg(self.bin("python"))
            .arg("--out")
            .arg(&wheels);
        step(
            &format!("maturin build (debug, --features {TEST_FEATURES})"),
            build,
        )?;

        let wheel = single_wheel(&wheels)?;
        let mut install = self.command(self.bin("python"));
        install
            .args([
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "--no-compile",
                "--force-reinstall",
                "--quiet",
            ])
            .arg(&wheel);
        step("pip install the wheel", install)
    }
}

/// The interpreter that makes the environment: `$PYTHON`, else `python3`.
fn base_python() -> OsString {
    env::var_os("PYTHON").unwrap_or_else(|| "python3".into())
}

/// `cargo xtask python [pytest arguments...]`: every Python step, with the
/// arguments passed on to pytest.
pub(crate) fn command(pytest_args: &[String]) -> Result<(), String> {
    if pytest_args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", crate::USAGE);
        return Ok(());
    }
    run(pytest_args)
}

/// `cargo xtask NAME [pytest arguments...]` for a suite of its own venv:
/// the usage on `--help`; else the environment made and filled when
/// missing, the package built and installed into it, then `tests`, timed.
pub(crate) fn suite(
    name: &str,
    venv: Venv,
    pytest_args: &[String],
    tests: impl FnOnce(&Venv) -> Result<(), String>,
) -> Result<(), String> {
    if pytest_args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{}", crate::USAGE);
        return Ok(());
    }
    let start = Instant::now();
    venv.ensure()?;
    venv.build_and_install()?;
    let result = tests(&venv);
    println!(
        "xtask: == {name}: {} in {:.0}s",
        if result.is_ok() { "ok" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    result
}

/// Every Python step, in order (see the module's documentation).
pub(crate) fn run(pytest_args: &[String]) -> Result<(), String> {
    let venv = Venv::dev();
    venv.ensure()?;
    venv.build_and_install()?;
    check(&venv, pytest_args)
}

/// The one wheel maturin wrote into `dir`.
fn single_wheel(dir: &Path) -> Result<PathBuf, String> {
    let wheels: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    match wheels.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(format!(
            "expected one wheel in {} after maturin build, found {}",
            dir.display(),
            wheels.len()
        )),
    }
}

/// ruff, ruff format, mypy and pytest, from the workspace root (their
/// configuration is in `pyproject.toml`).
fn check(venv: &Venv, pytest_args: &[String]) -> Result<(), String> {
    let caches = Venv::dev().home;

    let mut lint = venv.command(venv.bin("ruff"));
    lint.args(["check", "python"])
        .env("RUFF_CACHE_DIR", caches.join("ruff-cache"));
    step("ruff check python", lint)?;

    let mut format = venv.command(venv.bin("ruff"));
    format
        .args(["format", "--check", "python"])
        .env("RUFF_CACHE_DIR", caches.join("ruff-cache"));
    step("ruff format --check python", format)?;

    let mut types = venv.command(venv.bin("python"));
    types
        .args(["-m", "mypy"])
        .env("MYPY_CACHE_DIR", caches.join("mypy-cache"));
    step("mypy (strict, python/rlpool)", types)?;

    // The examples in the installed package's docstrings (each public
    // module has one), run where a user's import finds them; but
    // rlpool.torchrl's, which needs torch (`cargo xtask test-torchrl` runs it).
    let mut examples = venv.pytest();
    examples.args([
        "-q",
        "--doctest-modules",
        "--ignore-glob=*/rlpool/torchrl.py",
        "--pyargs",
        "rlpool",
    ]);
    step(
        "pytest --doctest-modules (the package's examples)",
        examples,
    )?;

    let mut tests = venv.pytest();
    tests.args(pytest_args);
    step("pytest python/tests", tests)
}
