// Package park holds the mechanisms of idle connections that the proxy's front-ends
// share, and none of their policy (when to park, what a woken connection becomes, its
// accounting and budgets stay in the proxy):
//   - a connection's lifecycle, one State word shared by every form the connection
//     takes ([Life]): who owns it now and how to end it;
//   - the [Parker]: one goroutine on an epoll instance of its own that holds idle
//     connections without a goroutine or a buffer each, serves them back when they are
//     readable and ends them at their idle timeout or hang-up, with the claim protocol
//     that lets exactly one party win each (Linux);
//   - a sleeping connection's own descriptor ([FD]: duplicated at sleep, woken into a Go
//     connection as it is; Linux);
//   - a client's pace, which decides how long an idle connection waits awake before it
//     parks ([Pace]), and the coarse deadlines of those waits ([Coarse]).
//
// It knows nothing of routes, statistics, budgets, protocols or listeners.
package park
