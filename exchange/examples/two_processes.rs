//! Two processes exchanging observations through shared-memory slots, with
//! no pool: the parent creates the [`Exchange`], passes its descriptor to a
//! child (this example, started again with `TWO_PROCESSES_CHILD` set to the
//! descriptor's number), sends it 1000 actions and receives an observation
//! for each; the child steps a trivial counter.
//!
//! ```text
//! cargo run --release -p exchange --example two_processes
//! ```

use std::error::Error;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

use exchange::{Exchange, Field, Schema, FIRST_COMMAND};
use tensordict::{DType, Tensor, TensorDict};

/// The environment variable that makes this program the child.
const CHILD: &str = "TWO_PROCESSES_CHILD";
/// Actions the parent sends.
const STEPS: usize = 1000;
/// The command that asks the child to step.
const STEP: u32 = FIRST_COMMAND;
/// The command that asks the child to stop.
const STOP: u32 = FIRST_COMMAND + 1;
/// How long either side waits for the other before giving up.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The schemas: the action in, the counter's observation out, no next.
fn schemas() -> Result<(Schema, Schema, Schema), Box<dyn Error>> {
    let input = Schema::new(&[], vec![Field::new("action", DType::I64, &[1])?])?;
    let result = Schema::new(
        &[],
        vec![
            Field::new("observation", DType::F32, &[4])?,
            Field::new("reward", DType::F32, &[1])?,
            Field::new("done", DType::Bool, &[1])?,
        ],
    )?;
    Ok((input, result, Schema::empty(&[])))
}

fn main() -> Result<(), Box<dyn Error>> {
    match std::env::var(CHILD) {
        Ok(fd) => child(fd.parse()?),
        Err(_) => parent(),
    }
}

/// The child: waits for a command, adds the action to its counter and
/// publishes `[counter, step, action, 0]` as the observation.
fn child(fd: i32) -> Result<(), Box<dyn Error>> {
    let (input, result_schema, next) = schemas()?;
    // SAFETY: the parent passed this descriptor open and without
    // close-on-exec; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let exchange = Exchange::open(fd, input.clone(), result_schema, next)?;
    let mut action = input.zeros();
    let mut counter = 0i64;
    let mut step = 0i64;
    loop {
        let Some(command) = exchange.wait_command(0, Some(Instant::now() + TIMEOUT))? else {
            return Err("no command from the parent".into());
        };
        if command == STOP {
            return Ok(());
        }
        exchange.read_input(0, &mut action)?;
        let a = action.tensor("action")?.as_slice::<i64>()?[0];
        counter += a;
        step += 1;
        let mut result = TensorDict::new(&[]);
        result.set(
            "observation",
            Tensor::from_slice(&[4], &[counter as f32, step as f32, a as f32, 0.0])?,
        )?;
        result.set("reward", Tensor::full(&[1], 1.0f32))?;
        result.set("done", Tensor::full(&[1], false))?;
        exchange.publish(0, &result)?;
    }
}

/// The parent: sends the actions, checks every observation, prints the
/// round-trip times and the exchange's statistics.
fn parent() -> Result<(), Box<dyn Error>> {
    let (input, result, next) = schemas()?;
    let mut exchange = Exchange::create("two_processes", input, result, next, 1)?;
    let theirs = exchange.try_clone_fd()?;
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())?;
    let mut child = Command::new(std::env::current_exe()?)
        .env(CHILD, theirs.as_raw_fd().to_string())
        .spawn()?;
    drop(theirs);

    let outcome = (|| -> Result<Vec<Duration>, Box<dyn Error>> {
        let mut times = Vec::with_capacity(STEPS);
        let mut counter = 0i64;
        for step in 1..=STEPS {
            let a = (step % 3) as i64 - 1;
            counter += a;
            let mut action = TensorDict::new(&[]);
            action.set("action", Tensor::full(&[1], a))?;
            let start = Instant::now();
            exchange.write_input(0, &action)?;
            exchange.post(0, STEP)?;
            let observation = exchange.receive_one(0, Some(TIMEOUT))?;
            times.push(start.elapsed());
            let obs = observation.tensor("observation")?.to_vec::<f32>()?;
            if obs != [counter as f32, step as f32, a as f32, 0.0] {
                return Err(format!("step {step}: unexpected observation {obs:?}").into());
            }
        }
        exchange.post(0, STOP)?;
        Ok(times)
    })();
    let status = match outcome {
        Ok(_) => child.wait()?,
        Err(_) => {
            let _ = child.kill();
            child.wait()?
        }
    };
    let mut times = outcome?;
    if !status.success() {
        return Err(format!("the child failed: {status}").into());
    }

    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!("{STEPS} round trips through one shared-memory slot:");
    println!(
        "  min {:?}  median {:?}  p99 {:?}  max {:?}  mean {:?}",
        at(0.0),
        at(0.5),
        at(0.99),
        at(1.0),
        mean
    );
    println!("exchange statistics:\n{}", exchange.stats(false));
    Ok(())
}
