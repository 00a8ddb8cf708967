<?php
// The PHP request loop of scripts/bench-runtimes, run by `php -S`: each
// request renders a page whose checksum costs a few ms of CPU (4-5 ms here) in the
// app's own functions (handle -> render -> mix), so that the PHP reader
// has frames to name in most stacks, as in a real app's handlers.

function mix(int $h, int $r): int
{
    for ($i = 0; $i < 2000; $i++) {
        $h = (($h ^ ($i + $r)) * 2654435761) & 0xffffffff;
    }
    return $h;
}

function render(string $url): string
{
    $h = strlen($url);
    for ($r = 0; $r < 5; $r++) {
        $h = mix($h, $r);
    }
    return "<p>$url $h</p>\n";
}

function handle(): void
{
    header('Content-Type: text/html');
    echo render($_SERVER['REQUEST_URI'] ?? '/');
}

handle();
