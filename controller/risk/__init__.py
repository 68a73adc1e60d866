"""Pure: workloads + capacity -> deadline risk, predicted waits and demand forecasts."""
