# A Ruby request loop for scripts/bench-ruby: a dispatcher hands requests
# to worker threads through a Queue; each request computes a little and
# answers through another Queue (every hand-off a GVL switch and a wake-up:
# what costs a profiler most). Run: ruby loop.rb SECONDS [WORKERS]; prints
# one JSON line: requests served per second over SECONDS, after a warm-up.
require "json"

def mono = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def handle(n)
  x = 0
  i = 0
  while i < n
    x = (x * 31 + i) % 1_000_003
    i += 1
  end
  x
end

def serve(requests, answers)
  while (n = requests.pop)
    answers.push(handle(n))
  end
end

seconds = (ARGV[0] || 3).to_f
workers = (ARGV[1] || 4).to_i
sleep 0.5 # the capture finds the interpreter
requests = Queue.new
answers = Queue.new
threads = (1..workers).map { |k| Thread.new { Thread.current.name = "serve-#{k}"; serve(requests, answers) } }
served = 0
count = lambda do |until_t|
  while mono < until_t
    workers.times { requests.push(2000) }
    workers.times { answers.pop }
    served += workers
  end
end
count.call(mono + 0.5)
served = 0
start = mono
count.call(start + seconds)
rate = served / (mono - start)
workers.times { requests.push(nil) }
threads.each(&:join)
puts JSON.generate({ "requests_per_s" => rate.round(1) })
