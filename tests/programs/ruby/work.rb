# A Ruby program whose threads time their own methods (CLOCK_MONOTONIC,
# read through the vDSO: no system call in a window): each
# worker thread's work() calls crunch (on the CPU), nap (in sleep) and
# with_lock (waiting for a Mutex another thread holds). Run:
# ruby work.rb SECONDS [GO]; prints one JSON line: per thread name, each
# method's time and the whole run's, in ns. With GO, it first waits for
# that file to exist (a capture attached by pid says when).
require "json"

def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)

def crunch(n)
  x = 0
  i = 0
  while i < n
    x = (x * 31 + i) % 1_000_003
    i += 1
  end
  x
end

def nap(seconds)
  sleep(seconds)
end

def with_lock(lock)
  lock.synchronize { 0 }
end

def work(seconds, lock)
  t = { "crunch" => 0, "nap" => 0, "with_lock" => 0 }
  start = mono
  sink = 0
  # Nothing but the method between two reads: a thread CPU-time read
  # (a system call) once sat in nap's window, and a preemption at its
  # exit after crunch's long turn on the CPU (3.3% of the thread's time,
  # under work -> cpu) counted as nap's by the clocks.
  while mono - start < seconds * 1e9
    a = mono
    sink += crunch(150_000)
    b = mono
    nap(0.004)
    c = mono
    with_lock(lock)
    d = mono
    t["crunch"] += b - a
    t["nap"] += c - b
    t["with_lock"] += d - c
  end
  t["total"] = mono - start
  t["sink"] = sink % 7
  t
end

seconds = (ARGV[0] || 2).to_f
sleep 0.01 until File.exist?(ARGV[1]) if ARGV[1]
# Untimed, before the threads start: the capture finds the interpreter
# within a turn of its loop (up to hundreds of ms on a loaded machine).
100.times { sleep 0.01 }
lock = Mutex.new
done = false
holder = Thread.new do
  Thread.current.name = "holder"
  until done
    lock.synchronize { sleep 0.008 }
    sleep 0.001
  end
end
results = {}
workers = (1..2).map do |k|
  Thread.new do
    Thread.current.name = "worker-#{k}"
    results[Thread.current.name] = work(seconds, lock)
  end
end
workers.each(&:join)
done = true
holder.join
puts JSON.generate(results)
