<?php
// A PHP program that times its own functions (hrtime, the monotonic
// clock): crunch() computes on the CPU, nap() sleeps in usleep, both
// called from work(). Run: php work.php SECONDS [GO]; prints one JSON
// line with each function's time and the whole run's, in ns. With GO, it
// first waits for that file to exist (a capture attached by pid says
// when).

function crunch(int $n): int
{
    $x = 0;
    for ($i = 0; $i < $n; $i++) {
        $x = ($x * 31 + $i) % 1000003;
    }
    return $x;
}

function nap(int $us): void
{
    usleep($us);
}

function work(float $seconds): array
{
    $t = ['crunch' => 0, 'nap' => 0];
    $start = hrtime(true);
    $sink = 0;
    while (hrtime(true) - $start < $seconds * 1e9) {
        $a = hrtime(true);
        $sink += crunch(300000);
        $b = hrtime(true);
        nap(2000);
        $c = hrtime(true);
        $t['crunch'] += $b - $a;
        $t['nap'] += $c - $b;
    }
    $t['total'] = hrtime(true) - $start;
    $t['sink'] = $sink % 7;
    return $t;
}

if (isset($argv[2])) {
    while (!file_exists($argv[2])) {
        usleep(10000);
        clearstatcache();
    }
}
// Untimed, before work(): the capture finds the interpreter within a turn
// of its loop (up to hundreds of ms on a loaded machine), as it finds a
// server that runs already. Short sleeps, as a sleep's stack is taken
// where it begins; in time_nanosleep, not usleep, so that the test tells
// them from nap()'s.
for ($i = 0; $i < 100; $i++) {
    time_nanosleep(0, 10000000);
}
echo json_encode(work((float)($argv[1] ?? 2))), "\n";
