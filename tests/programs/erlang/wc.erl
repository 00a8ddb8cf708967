%% An Erlang program for tests/runtime_erlang.rs: burn/2 computes in a
%% process of its own (burner/0), another process waits in receive ...
%% after (napper/0). Run: erl -noshell -pa DIR -s wc main SECONDS.
-module(wc).
-export([main/1, burner/0, napper/0]).

main([Secs]) ->
    Ms = list_to_integer(atom_to_list(Secs)) * 1000,
    Self = self(),
    B = spawn(fun() -> Self ! {burned, burner()} end),
    N = spawn(fun() -> Self ! {napped, napper()} end),
    timer:sleep(Ms),
    B ! stop,
    N ! stop,
    receive {burned, X} -> io:format("burned ~p~n", [X rem 7]) end,
    receive {napped, Y} -> io:format("napped ~p~n", [Y]) end,
    halt(0).

burner() -> burner(0).

burner(Acc) ->
    receive stop -> Acc
    after 0 -> burner(burn(200000, Acc))
    end.

burn(0, Acc) -> Acc;
burn(N, Acc) -> burn(N - 1, (Acc * 31 + N) rem 1000003).

napper() -> napper(0).

napper(K) ->
    receive stop -> K
    after 5 -> napper(K + 1)
    end.
