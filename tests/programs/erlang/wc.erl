%% An Erlang program for tests/runtime_erlang.rs: burn/2 computes in a
%% process of its own (burner/0), another process waits in receive ...
%% after (napper/0). Run: erl -noshell -pa DIR -s wc main SECONDS [GO]:
%% with GO, it first waits for that file to exist (written once a capture
%% is attached). Its own clocks, printed last as a JSON line: burn_us, the
%% time burner spent in its calls of burn/2, and window_us, the time from
%% the start (or GO) to burner's reply to stop.
-module(wc).
-export([main/1, burner/0, napper/0]).

main([Secs | Go]) ->
    wait_go(Go),
    T0 = erlang:monotonic_time(microsecond),
    Ms = list_to_integer(atom_to_list(Secs)) * 1000,
    Self = self(),
    B = spawn(fun() -> Self ! {burned, burner()} end),
    N = spawn(fun() -> Self ! {napped, napper()} end),
    timer:sleep(Ms),
    B ! stop,
    N ! stop,
    receive {burned, {X, BurnUs}} -> io:format("burned ~p~n", [X rem 7]) end,
    Window = erlang:monotonic_time(microsecond) - T0,
    receive {napped, Y} -> io:format("napped ~p~n", [Y]) end,
    io:format("{\"burn_us\": ~b, \"window_us\": ~b}~n", [BurnUs, Window]),
    halt(0).

wait_go([]) -> ok;
wait_go([Go]) ->
    case filelib:is_file(atom_to_list(Go)) of
        true -> ok;
        false -> timer:sleep(10), wait_go([Go])
    end.

burner() -> burner({0, 0}).

burner({Acc, Us}) ->
    receive stop -> {Acc, Us}
    after 0 ->
        T = erlang:monotonic_time(microsecond),
        A = burn(200000, Acc),
        burner({A, Us + erlang:monotonic_time(microsecond) - T})
    end.

burn(0, Acc) -> Acc;
burn(N, Acc) -> burn(N - 1, (Acc * 31 + N) rem 1000003).

napper() -> napper(0).

napper(K) ->
    receive stop -> K
    after 5 -> napper(K + 1)
    end.
